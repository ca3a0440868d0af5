"""The schema types beyond custom_op's annotations: plain ``int`` (``opclass.Int``), ``str[]`` and
``Device[]``, each through every eager call path, ``torch.compile(fullgraph=True)``,
``torch.export`` and ``opcheck``; the types refused with their reason; and the docs' table, which
is the code's table."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Callable, NamedTuple, Optional

import pytest
import torch
from torch import Tensor
from torch.types import Number

import opclass
from opclass import CustomOp, Int, OpDefinitionError, SchemaType
from opclass._harness import call_paths

X23 = torch.arange(6.0).reshape(2, 3)


def k_int(x: Tensor, axis: Int) -> Tensor:
    return x.sum(axis)


def k_int_default(x: Tensor, axis: Int = 1) -> Tensor:
    return x.sum(axis)


def k_int_list(x: Tensor, dims: list[Int]) -> Tensor:
    return x.sum(dims)


def k_optional_int(x: Tensor, n: Optional[Int] = None) -> Tensor:
    return x.clone() if n is None else x * n


def k_optional_int_list(x: Tensor, dims: Optional[list[Int]] = None) -> Tensor:
    return x.sum() if dims is None else x.sum(dims)


def k_int_return(x: Tensor) -> tuple[Tensor, Int]:
    return x * 2, x.dim()


def k_str_list(x: Tensor, modes: list[str]) -> Tensor:
    for mode in modes:
        x = {"double": x * 2, "neg": -x}[mode]
    return x


def k_optional_str_list(x: Tensor, modes: Optional[list[str]] = None) -> Tensor:
    return x.clone() if modes is None else x * len(modes)


def k_device_list(x: Tensor, devices: list[torch.device]) -> Tensor:
    return x.to(devices[0]) * 1


def k_bool_list(x: Tensor, flips: list[bool]) -> Tensor:
    return -x if flips.count(True) % 2 else x.clone()


def k_float_list(x: Tensor, gains: list[float]) -> Tensor:
    return x * gains[0] * gains[1]


def k_scalar_list(x: Tensor, gains: list[Number]) -> Tensor:
    return x * float(gains[0] * gains[1])


def k_optional_tensor_list(x: Tensor, ys: list[Optional[Tensor]]) -> Tensor:
    return x + sum(y for y in ys if y is not None)


class Row(NamedTuple):
    kernel: Callable[..., Any]
    schema: str
    args: tuple[Any, ...]
    expected: Any


ROWS = {
    "int": Row(k_int, "(Tensor x, int axis) -> Tensor", (X23, 1), X23.sum(1)),
    "int_default": Row(k_int_default, "(Tensor x, int axis=1) -> Tensor", (X23,), X23.sum(1)),
    "int_list": Row(k_int_list, "(Tensor x, int[] dims) -> Tensor", (X23, [0, 1]), X23.sum([0, 1])),
    "optional_int": Row(k_optional_int, "(Tensor x, int? n=None) -> Tensor", (X23, 3), X23 * 3),
    "optional_int_list": Row(k_optional_int_list, "(Tensor x, int[]? dims=None) -> Tensor", (X23, [1]), X23.sum([1])),
    "int_return": Row(k_int_return, "(Tensor x) -> (Tensor, int)", (X23,), (X23 * 2, 2)),
    "str_list": Row(k_str_list, "(Tensor x, str[] modes) -> Tensor", (X23, ["double", "neg"]), -(X23 * 2)),
    "optional_str_list": Row(k_optional_str_list, "(Tensor x, str[]? modes=None) -> Tensor", (X23, ["a", "b"]), X23 * 2),
    "device_list": Row(k_device_list, "(Tensor x, Device[] devices) -> Tensor", (X23, [torch.device("cpu")]), X23 * 1),
    "bool_list": Row(k_bool_list, "(Tensor x, bool[] flips) -> Tensor", (X23, [True, False]), -X23),
    "float_list": Row(k_float_list, "(Tensor x, float[] gains) -> Tensor", (X23, [2.0, 0.5]), X23),
    "scalar_list": Row(k_scalar_list, "(Tensor x, Scalar[] gains) -> Tensor", (X23, [2, 1.5]), X23 * 3.0),
    "optional_tensor_list": Row(k_optional_tensor_list, "(Tensor x, Tensor?[] ys) -> Tensor", (X23, [X23, None]), X23 * 2),
}


def _define(ns: str, name: str, row: Row) -> Any:
    class Op(CustomOp, name=f"{ns}::{name}"):
        default = staticmethod(row.kernel)  # torch ops only: it serves as the fake kernel too

    return Op


def _same(got: Any, expected: Any) -> None:
    if isinstance(expected, tuple):
        assert type(got) is tuple and len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)
    elif isinstance(expected, Tensor):
        assert isinstance(got, Tensor) and torch.equal(got, expected)
    else:
        assert type(got) is type(expected) and got == expected


class _Call(torch.nn.Module):
    def __init__(self, op: Any, rest: tuple[Any, ...]) -> None:
        super().__init__()
        self.op, self.rest = op, rest

    def forward(self, x: Tensor) -> Any:
        return self.op(x, *self.rest)


@pytest.mark.parametrize("name", list(ROWS))
def test_schema_type_on_every_path(ns: str, name: str) -> None:
    row = ROWS[name]
    op = _define(ns, name, row)
    assert op.schema == row.schema
    assert op.op._schema == torch._C.parse_schema(f"{ns}::{name}{row.schema}")
    for label, fn in call_paths(op).items():
        _same(fn(*row.args), row.expected)
    x, rest = row.args[0], row.args[1:]
    torch._dynamo.reset()
    _same(torch.compile(lambda x: op(x, *rest), backend="aot_eager", fullgraph=True)(x), row.expected)
    exported = torch.export.export(_Call(op, rest), (x,))
    _same(exported.module()(x), row.expected)
    assert set(torch.library.opcheck(op.op, row.args).values()) == {"SUCCESS"}


def test_plain_int_is_specialised_and_symint_is_not(ns: str) -> None:
    """The point of a plain int: torch.compile bakes it in, where a SymInt may stay symbolic."""

    class Plain(CustomOp, name=f"{ns}::plain"):
        @staticmethod
        def default(x: Tensor, n: Int) -> Tensor:
            return x * n

    class Sym(CustomOp, name=f"{ns}::sym"):
        @staticmethod
        def default(x: Tensor, n: int) -> Tensor:
            return x * n

    for op, kind, graphs in ((Plain, "int", 3), (Sym, "SymInt", 1)):
        assert f"(Tensor x, {kind} n)" in str(op.op._schema)
        torch._dynamo.reset()
        made: list[Any] = []

        def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
            made.append(gm)
            return gm.forward

        fn = torch.compile(lambda x, n: op(x, n), backend=backend, fullgraph=True, dynamic=True)
        for n in (2, 3, 4):
            assert torch.equal(fn(torch.ones(2), n), torch.full((2,), float(n)))
        assert len(made) == graphs, kind  # a graph per value of a plain int; one for a SymInt


@pytest.mark.parametrize(
    ("annotation", "says"),
    [
        ("Optional[torch.Generator]", "torch.compile cannot pass a torch.Generator to a custom op"),
        ("torch.UntypedStorage", "torch.compile and torch.export cannot pass a Storage to a custom op"),
        ("torch.Stream", "torch.compile and torch.export cannot pass a Stream to a custom op"),
        ("list[torch.dtype]", "torch.library.opcheck cannot check a list of dtypes"),
    ],
)
def test_types_torch_cannot_carry_are_refused_with_the_reason(ns: str, annotation: str, says: str) -> None:
    with pytest.raises(OpDefinitionError) as info:
        exec(  # noqa: S102 - the annotation is the subject
            f"class Bad(CustomOp, name='{ns}::bad'):\n    @staticmethod\n    def default(x: Tensor, a: {annotation}) -> Tensor:\n        return x\n",
            {"CustomOp": CustomOp, "Tensor": Tensor, "torch": torch, "Optional": Optional},
        )
    assert says in info.value.problem
    assert "in schema= if eager calls are all you need" in info.value.fix


def test_schema_type_marker_checks_its_python_type(ns: str) -> None:
    with pytest.raises(OpDefinitionError, match=r"SchemaType\('int'\) annotates float, not int"):

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor, n: Annotated[float, SchemaType("int")]) -> Tensor:
                return x * n

    with pytest.raises(ValueError, match="SchemaType\\('Dimname'\\): supported are 'int', 'SymInt'"):
        SchemaType("Dimname")


def _annotated(**annotations: Any) -> Any:
    """A kernel whose annotations are objects (this module's are strings: ``from __future__ import annotations``)."""

    def kernel(x, n, sizes=()):  # type: ignore[no-untyped-def]
        return x

    kernel.__annotations__ = {"x": Tensor, **annotations, "return": Tensor}
    return staticmethod(kernel)


def test_a_bare_schema_type_is_refused_with_the_annotation_to_write(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:
        type("Bad", (CustomOp,), {"default": _annotated(n=SchemaType("int"))}, name=f"{ns}::bad")
    assert str(info.value) == (
        "Bad.default(x: Tensor, n: opclass.SchemaType('int'), sizes=()) -> Tensor: parameter 'n': SchemaType('int') is not an "
        "annotation by itself; it marks a type inside Annotated: write opclass.Int"
    )


def test_messages_write_opclass_int_as_users_write_it(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:
        hooks = {"cpu": _annotated(n=Int, sizes=list[Int]), "abstract": _annotated(n=float, sizes=list[Int])}
        type("Bad", (CustomOp,), hooks, name=f"{ns}::bad")
    line = str(info.value)
    assert "Bad.cpu(x: Tensor, n: opclass.Int, sizes: list[opclass.Int] = ()) -> Tensor" in line, line
    assert "Annotated" not in line and "text=" not in line
    with pytest.raises(OpDefinitionError, match=r"supported are Tensor, int, opclass.Int, float"):
        type("Odd", (CustomOp,), {"default": _annotated(n=set)}, name=f"{ns}::odd")


def _head(ns: str, plain: bool) -> Any:
    """x[:n] * 2, with n a plain int (opclass.Int) or a SymInt (bare int)."""

    def default(x, n):  # type: ignore[no-untyped-def]
        return x[:n] * 2

    def abstract(x, n):  # type: ignore[no-untyped-def]
        return x.new_empty(min(n, x.shape[0]), *x.shape[1:])

    for fn in (default, abstract):
        fn.__annotations__ = {"x": Tensor, "n": Int if plain else int, "return": Tensor}
    return type("Head", (CustomOp,), {"default": staticmethod(default), "abstract": staticmethod(abstract)}, name=f"{ns}::head")


_SPECIALIZED = r"::head \(Head\): 'n' is opclass.Int \(a plain int\) and gets a symbolic size, which torch specializes to one value"


def test_a_symbolic_size_for_opclass_int_under_compile_is_said_once(ns: str) -> None:
    op = _head(ns, plain=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t, t.shape[0]), backend="aot_eager", dynamic=True)
    with pytest.warns(UserWarning, match=_SPECIALIZED) as seen:
        for rows in (3, 4, 5):
            assert torch.equal(compiled(torch.ones(rows, 2)), torch.full((rows, 2), 2.0))
    assert len([w for w in seen if "opclass.Int" in str(w.message)]) == 1
    assert "Annotate n as int (SymInt) to keep the size symbolic, or pass a constant" in str(seen[0].message)


@pytest.mark.parametrize("strict", [False, True])
def test_a_dynamic_dim_for_opclass_int_under_export_is_said(ns: str, strict: bool) -> None:
    op = _head(ns, plain=True)

    class M(torch.nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return op(x, x.shape[0])

    with pytest.warns(UserWarning, match=_SPECIALIZED), pytest.raises(Exception, match="Constraints violated"):
        torch.export.export(M(), (torch.ones(4, 2),), dynamic_shapes=({0: torch.export.Dim("batch")},), strict=strict)


def test_a_bare_int_takes_a_symbolic_size_without_a_word(ns: str) -> None:
    import warnings

    op = _head(ns, plain=False)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: op(t, t.shape[0]), backend="aot_eager", dynamic=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*opclass.Int.*")
        for rows in (3, 4, 5):
            assert torch.equal(compiled(torch.ones(rows, 2)), torch.full((rows, 2), 2.0))


def test_the_docs_table_is_the_code_table() -> None:
    text = (Path(__file__).parents[1] / "docs" / "guide" / "schema.md").read_text()
    rows = re.search(r"\| annotation \| schema type \|\n\|---\|---\|\n((?:\|.*\|\n)+)", text)
    assert rows is not None
    cell = lambda t: t.replace("|", "\\|")  # noqa: E731
    assert rows.group(1) == "".join(f"| {cell(a)} | {cell(b)} |\n" for a, b in opclass.SUPPORTED_TYPES)


# --------------------------------------------------------------------------- real libraries


def test_quantized_decomposed_needs_no_schema_string(ns: str) -> None:
    """torch's own quantized_decomposed::quantize_per_tensor, from annotations alone: the same
    schema, the same values, bit for bit."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - defines torch's op

    class QuantizePerTensor(CustomOp, name=f"{ns}::quantize_per_tensor"):
        @staticmethod
        def default(input: Tensor, scale: float, zero_point: Int, quant_min: Int, quant_max: Int, dtype: torch.dtype) -> Tensor:
            inv_scale = 1.0 / scale
            return torch.clamp(torch.round(input * inv_scale) + zero_point, quant_min, quant_max).to(dtype)

    original = torch.ops.quantized_decomposed.quantize_per_tensor.default
    assert f"{ns}::quantize_per_tensor{QuantizePerTensor.schema}" == str(original._schema).replace("quantized_decomposed::", f"{ns}::")
    x = torch.randn(64) * 10
    args = (x, 0.05, 3, -128, 127, torch.int8)
    for fn in call_paths(QuantizePerTensor).values():
        assert torch.equal(fn(*args), original(*args))
    assert set(torch.library.opcheck(QuantizePerTensor.op, args).values()) == {"SUCCESS"}


def test_bitsandbytes_needs_no_schema_string(ns: str) -> None:
    """bitsandbytes defines quantize_blockwise with the schema string below (torch.library.define);
    the annotations give the same one."""

    class QuantizeBlockwise(CustomOp, name=f"{ns}::quantize_blockwise"):
        @staticmethod
        def default(A: Tensor, code: Tensor, blocksize: Int) -> tuple[Tensor, Tensor]:
            blocks = A.reshape(-1, blocksize)
            absmax = blocks.abs().amax(1)
            scaled = blocks / absmax[:, None]
            out = (scaled[..., None] - code).abs().argmin(-1).to(torch.uint8)
            return out.reshape(A.shape), absmax

    assert QuantizeBlockwise.schema == "(Tensor A, Tensor code, int blocksize) -> (Tensor, Tensor)"
    args = (torch.randn(4, 64), torch.linspace(-1, 1, 256), 64)
    outs = [fn(*args) for fn in call_paths(QuantizeBlockwise).values()]
    assert all(torch.equal(o[0], outs[0][0]) and torch.equal(o[1], outs[0][1]) for o in outs)
    assert set(torch.library.opcheck(QuantizeBlockwise.op, args).values()) == {"SUCCESS"}


def test_kernels_keep_their_parameter_names_when_positional_only(ns: str) -> None:
    schema = "(Tensor input, int quant_min, int quant_max) -> Tensor"
    with pytest.raises(OpDefinitionError) as info:

        class Named(CustomOp, name=f"{ns}::named", schema=schema):
            @staticmethod
            def cpu(input, qmin, qmax):  # type: ignore[no-untyped-def]
                return input.clamp(qmin, qmax)

    assert str(info.value) == (
        "Named.cpu(input, qmin, qmax): its parameters (input, qmin, qmax) do not match the op's (input, quant_min, quant_max); "
        "write cpu(input, quant_min, quant_max), or keep its names and make them positional-only: (input, qmin, qmax, /)"
    )

    class Clamp(CustomOp, name=f"{ns}::clamp", schema=schema):
        @staticmethod
        def cpu(input, qmin, qmax, /):  # type: ignore[no-untyped-def]
            return input.clamp(qmin, qmax)

    x = torch.arange(-3.0, 4.0)
    for fn in call_paths(Clamp).values():
        assert fn(x, -1, 2).tolist() == [-1, -1, -1, 0, 1, 2, 2]
    assert Clamp(input=x, quant_min=0, quant_max=1).tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_an_autograd_only_op_of_quantized_decomposed_needs_no_schema_string(ns: str) -> None:
    """fake_quant_per_channel: torch registers only an Autograd kernel (and Meta); the autograd
    hook with annotations alone gives the same schema, values, gradients and inference_mode error."""
    from torch.ao.quantization.fx._decomposed import FakeQuantPerChannel

    class FakeQuant(CustomOp, name=f"{ns}::fake_quant_per_channel"):
        @staticmethod
        def autograd(input: Tensor, scales: Tensor, zero_points: Tensor, axis: Int, quant_min: Int, quant_max: Int) -> Tensor:
            return FakeQuantPerChannel.apply(input, scales, zero_points, axis, quant_min, quant_max)

    original = torch.ops.quantized_decomposed.fake_quant_per_channel.default
    assert f"{ns}::fake_quant_per_channel{FakeQuant.schema}" == str(original._schema).replace("quantized_decomposed::", f"{ns}::")
    x = (torch.randn(3, 4) * 4).requires_grad_()
    args = (torch.tensor([0.5, 0.25, 1.0]), torch.tensor([0, 1, -1], dtype=torch.int32), 0, -4, 3)
    want = original(x, *args)
    want.sum().backward()
    want_grad, x.grad = x.grad, None
    for fn in call_paths(FakeQuant).values():
        got = fn(x, *args)
        got.sum().backward()
        assert torch.equal(got, want) and torch.equal(x.grad, want_grad)
        x.grad = None
        # torch's own op raises that nothing runs on CPU; the port also says why and what to do.
        with torch.inference_mode(), pytest.raises(NotImplementedError, match=r"\(FakeQuant.autograd\): the op's only kernel is at the Autograd key, which torch.inference_mode\(\) skips"):
            fn(x.detach(), *args)
    with torch.inference_mode(), pytest.raises(NotImplementedError, match="CPU"):
        original(x.detach(), *args)
