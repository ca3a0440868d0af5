"""Schema derivation: Python annotations -> dispatcher schema string, and the op built from it.

Covers the annotation table (every supported parameter and return type, defaults of every kind,
keyword-only arguments) -- each row checks ``MyOp.schema`` exactly and runs the op through both
``MyOp(...)`` and ``torch.ops.<ns>.<name>(...)`` -- plus ``from __future__ import annotations``,
strings nested in annotations, ``GroupName``, hooks annotated in part (they take the kernel's schema),
explicit ``schema=``, ``mutates_args`` alias annotations, ``Tag.inplace`` / ``Tag.out`` schemas,
``inspect.signature(MyOp)``, overload names, snake_case names under an inherited namespace, and
variant subclasses that inherit hooks and the schema.
"""

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, List, Optional, Sequence

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

from opclass import CustomOp, OpMeta

from _paths import assert_paths_agree_on
from _versions import needs_tag

if torch.distributed.is_available():
    from torch.distributed.distributed_c10d import GroupName
else:
    GroupName = None

X = torch.arange(6.0)
X23 = torch.arange(6.0).reshape(2, 3)
X4D = torch.arange(24.0).reshape(1, 2, 3, 4)


# --------------------------------------------------------------------------- helpers


def define(ns: str, name: str, kernel: Callable[..., Any], **keywords: Any) -> type[CustomOp]:
    """An op ``ns::name`` whose ``default`` kernel is ``kernel``."""

    class Op(CustomOp, name=f"{ns}::{name}", **keywords):
        default = staticmethod(kernel)

    return Op


def torch_op(ns: str, name: str) -> Any:
    """``torch.ops.<ns>.<name>`` (the overload packet)."""
    return getattr(getattr(torch.ops, ns), name)


def assert_same(got: Any, expected: Any) -> None:
    """Equal values of the same Python type; Tensors equal in dtype, shape, strides and values."""
    if isinstance(expected, Tensor):
        assert isinstance(got, Tensor), f"expected a Tensor, got {got!r}"
        assert got.dtype == expected.dtype
        assert got.layout == expected.layout
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected), f"expected {type(expected).__name__}, got {got!r}"
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    else:
        assert type(got) is type(expected), f"expected {expected!r}, got {got!r}"
        assert got == expected


# --------------------------------------------------------------------------- the annotation table
# Kernels are module-level functions; each row names the kernel, the exact schema opclass must
# derive, a sample call and its expected result (computed independently of the kernel).


def k_tensor(x: Tensor) -> Tensor:
    return x * 2


def k_optional_tensor(x: Tensor, bias: Optional[Tensor]) -> Tensor:
    return x + 1 if bias is None else x + bias


def k_pipe_none_tensor(x: Tensor, bias: Tensor | None) -> Tensor:
    return x + 1 if bias is None else x + bias


def k_optional_tensor_default(x: Optional[Tensor] = None) -> Tensor:
    return torch.full((2,), 7.0) if x is None else x + 1


def k_list_tensor(xs: list[Tensor]) -> Tensor:
    return torch.stack(xs).sum(0)


def k_sequence_tensor(xs: Sequence[Tensor]) -> Tensor:
    return torch.stack(list(xs)).sum(0)


def k_list_optional_tensor(xs: list[Optional[Tensor]]) -> Tensor:
    return torch.stack([x if x is not None else torch.full_like(X, 100.0) for x in xs]).sum(0)


def k_int(x: Tensor, n: int) -> Tensor:
    return x * n


def k_optional_int(x: Tensor, n: Optional[int]) -> Tensor:
    return x - 1 if n is None else x * n


def k_float(x: Tensor, s: float) -> Tensor:
    return x * s


def k_bool(x: Tensor, flag: bool) -> Tensor:
    return x.neg() if flag else x + 0


def k_str(x: Tensor, mode: str) -> Tensor:
    return {"double": x * 2, "half": x / 2}[mode]


def k_sequence_int(x: Tensor, shape: Sequence[int]) -> Tensor:
    return x.reshape(shape) + 0


def k_list_float(x: Tensor, weights: list[float]) -> Tensor:
    return x * torch.tensor(weights, dtype=x.dtype)


def k_list_bool(x: Tensor, mask: list[bool]) -> Tensor:
    return x[torch.tensor(mask)]


def k_tuple_int(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    return x.permute(list(dims)).contiguous() + 0


def k_optional_list_int(x: Tensor, shape: Optional[list[int]]) -> Tensor:
    return x - 1 if shape is None else x.reshape(shape) + 0


def k_list_number(x: Tensor, coeffs: list[torch.types.Number]) -> Tensor:
    return x * coeffs[0] + coeffs[1]


def k_dtype(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x.to(dtype, copy=True)


def k_device(x: Tensor, device: torch.device) -> Tensor:
    assert isinstance(device, torch.device)
    return x.to(device, copy=True)


def k_number(x: Tensor, alpha: torch.types.Number) -> Tensor:
    return x * alpha


def k_layout(x: Tensor, layout: torch.layout) -> Tensor:
    return torch.zeros(x.shape, layout=layout) + x


def k_memory_format(x: Tensor, memory_format: torch.memory_format) -> Tensor:
    return x.clone(memory_format=memory_format)


def k_defaults(
    x: Tensor,
    a: Optional[int] = None,
    b: int = 3,
    c: float = 1.5,
    d: bool = True,
    e: str = "hi",
    f: torch.dtype = torch.float64,
    g: torch.device = torch.device("cpu"),
    h: tuple[int, ...] = (1, 2),
    layout: torch.layout = torch.strided,
    mf: torch.memory_format = torch.contiguous_format,
    dt: Optional[torch.dtype] = None,
) -> Tensor:
    assert layout is torch.strided and isinstance(g, torch.device)
    out = torch.empty(x.shape, dtype=f, device=g, layout=layout).copy_(x * b + c + d + len(e) + sum(h))
    out = out + (0 if a is None else a)
    return out.to(dt) if dt is not None else out.contiguous(memory_format=mf)


def k_kwarg_only_scalars(x: Tensor, *, alpha: float = 1.0, beta: int) -> Tensor:
    return x * alpha + beta


def k_kwarg_only_tensors(x: Tensor, *, other: Tensor, weight: Optional[Tensor] = None) -> Tensor:
    return x + other * (1 if weight is None else weight)


def k_tuple_return(x: Tensor) -> tuple[Tensor, Tensor]:
    return x + 1, x - 1


def k_mixed_tuple_return(x: Tensor) -> tuple[Tensor, int, float, bool]:
    return x * 3, x.numel(), float(x.sum()), bool(x.any())


def k_single_tuple_return(x: Tensor) -> tuple[Tensor]:
    return (x + 1,)


def k_none_return(x: Tensor) -> None:
    assert x.dim() == 1
    return None


def k_list_tensor_return(x: Tensor) -> list[Tensor]:
    return [x + i for i in range(3)]


def k_optional_tensor_return(x: Tensor, keep: bool) -> Optional[Tensor]:
    return x * 5 if keep else None


def k_int_return(x: Tensor) -> int:
    return x.numel()


def k_float_return(x: Tensor) -> float:
    return float(x.sum())


def k_bool_return(x: Tensor) -> bool:
    return bool((x > 4).any())


def k_number_return(x: Tensor) -> torch.types.Number:
    return x.numel() * 0.5


@dataclasses.dataclass(frozen=True)
class Row:
    """One annotation-table entry: kernel, the exact derived schema, a sample call and its result."""

    id: str
    kernel: Callable[..., Any]
    schema: str
    args: tuple[Any, ...]
    expected: Any
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


_DEFAULTS_SCHEMA = (
    '(Tensor x, SymInt? a=None, SymInt b=3, float c=1.5, bool d=True, str e="hi", ScalarType f=float64, '
    'Device g="cpu", SymInt[] h=[1, 2], Layout layout=strided, MemoryFormat mf=contiguous_format, '
    "ScalarType? dt=None) -> Tensor"
)

ROWS: list[Row] = [
    Row("tensor", k_tensor, "(Tensor x) -> Tensor", (X,), X * 2),
    Row("optional_tensor", k_optional_tensor, "(Tensor x, Tensor? bias) -> Tensor", (X, X), X * 2),
    Row("optional_tensor_none", k_optional_tensor, "(Tensor x, Tensor? bias) -> Tensor", (X, None), X + 1),
    Row("pipe_none_tensor", k_pipe_none_tensor, "(Tensor x, Tensor? bias) -> Tensor", (X, X), X * 2),
    Row("pipe_none_tensor_none", k_pipe_none_tensor, "(Tensor x, Tensor? bias) -> Tensor", (X, None), X + 1),
    Row("optional_tensor_default", k_optional_tensor_default, "(Tensor? x=None) -> Tensor", (), torch.full((2,), 7.0)),
    Row("list_tensor", k_list_tensor, "(Tensor[] xs) -> Tensor", ([X, X, X],), X * 3),
    Row("sequence_tensor", k_sequence_tensor, "(Tensor[] xs) -> Tensor", ([X, X],), X * 2),
    Row("list_optional_tensor", k_list_optional_tensor, "(Tensor?[] xs) -> Tensor", ([X, None],), X + 100),
    Row("int", k_int, "(Tensor x, SymInt n) -> Tensor", (X, 3), X * 3),
    Row("optional_int", k_optional_int, "(Tensor x, SymInt? n) -> Tensor", (X, None), X - 1),
    Row("float", k_float, "(Tensor x, float s) -> Tensor", (X, 0.5), X * 0.5),
    Row("bool", k_bool, "(Tensor x, bool flag) -> Tensor", (X, True), -X),
    Row("str", k_str, "(Tensor x, str mode) -> Tensor", (X, "half"), X / 2),
    Row("sequence_int", k_sequence_int, "(Tensor x, SymInt[] shape) -> Tensor", (X, [3, 2]), X.reshape(3, 2)),
    Row("list_float", k_list_float, "(Tensor x, float[] weights) -> Tensor", (X23, [1.0, 0.5, -1.0]), X23 * torch.tensor([1.0, 0.5, -1.0])),
    Row("list_bool", k_list_bool, "(Tensor x, bool[] mask) -> Tensor", (X, [True, False] * 3), X[::2].contiguous()),
    Row("tuple_int", k_tuple_int, "(Tensor x, SymInt[] dims) -> Tensor", (X23, (1, 0)), X23.t().contiguous()),
    Row("optional_list_int", k_optional_list_int, "(Tensor x, SymInt[]? shape) -> Tensor", (X, [2, 3]), X23.clone()),
    Row("optional_list_int_none", k_optional_list_int, "(Tensor x, SymInt[]? shape) -> Tensor", (X, None), X - 1),
    Row("list_number", k_list_number, "(Tensor x, Scalar[] coeffs) -> Tensor", (X, [2, 0.5]), X * 2 + 0.5),
    Row("dtype", k_dtype, "(Tensor x, ScalarType dtype) -> Tensor", (X, torch.int32), X.to(torch.int32)),
    Row("device", k_device, "(Tensor x, Device device) -> Tensor", (X, torch.device("cpu")), X.clone()),
    Row("number_int", k_number, "(Tensor x, Scalar alpha) -> Tensor", (X, 2), X * 2),
    Row("number_float", k_number, "(Tensor x, Scalar alpha) -> Tensor", (X, 0.25), X * 0.25),
    Row("layout", k_layout, "(Tensor x, Layout layout) -> Tensor", (X, torch.strided), X.clone()),
    Row(
        "memory_format",
        k_memory_format,
        "(Tensor x, MemoryFormat memory_format) -> Tensor",
        (X4D, torch.channels_last),
        X4D.clone(memory_format=torch.channels_last),
    ),
    Row("defaults_omitted", k_defaults, _DEFAULTS_SCHEMA, (X,), (X * 3 + 1.5 + 1 + 2 + 3).double()),
    Row(
        "defaults_given",
        k_defaults,
        _DEFAULTS_SCHEMA,
        (X4D, 10, 1, 0.5, False, "abcd", torch.float32, torch.device("cpu"), [4], torch.strided, torch.channels_last),
        (X4D + 0.5 + 4 + 4 + 10).contiguous(memory_format=torch.channels_last),
    ),
    Row("defaults_keyword", k_defaults, _DEFAULTS_SCHEMA, (X,), (X * 3 + 1.5 + 1 + 2 + 3).half(), {"dt": torch.half, "b": 3}),
    Row(
        "kwarg_only_scalars",
        k_kwarg_only_scalars,
        "(Tensor x, *, float alpha=1.0, SymInt beta) -> Tensor",
        (X,),
        X * 2 + 5,
        {"beta": 5, "alpha": 2.0},
    ),
    Row(
        "kwarg_only_tensors",
        k_kwarg_only_tensors,
        "(Tensor x, *, Tensor other, Tensor? weight=None) -> Tensor",
        (X,),
        X + X * 3,
        {"other": X, "weight": torch.full_like(X, 3.0)},
    ),
    Row("tuple_return", k_tuple_return, "(Tensor x) -> (Tensor, Tensor)", (X,), (X + 1, X - 1)),
    Row(
        "mixed_tuple_return",
        k_mixed_tuple_return,
        "(Tensor x) -> (Tensor, SymInt, float, bool)",
        (X,),
        (X * 3, 6, 15.0, True),
    ),
    Row("single_tuple_return", k_single_tuple_return, "(Tensor x) -> ((Tensor))", (X,), (X + 1,)),
    Row("none_return", k_none_return, "(Tensor x) -> ()", (X,), None),
    Row("list_tensor_return", k_list_tensor_return, "(Tensor x) -> Tensor[]", (X,), [X, X + 1, X + 2]),
    Row("optional_tensor_return", k_optional_tensor_return, "(Tensor x, bool keep) -> Tensor?", (X, True), X * 5),
    Row("optional_tensor_return_none", k_optional_tensor_return, "(Tensor x, bool keep) -> Tensor?", (X, False), None),
    Row("int_return", k_int_return, "(Tensor x) -> SymInt", (X,), 6),
    Row("float_return", k_float_return, "(Tensor x) -> float", (X,), 15.0),
    Row("bool_return", k_bool_return, "(Tensor x) -> bool", (X,), True),
    Row("number_return", k_number_return, "(Tensor x) -> Scalar", (X,), 3.0),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_annotation_table(ns: str, row: Row) -> None:
    op = define(ns, row.id, row.kernel)
    assert op.schema == row.schema
    assert op.qualname == f"{ns}::{row.id}"
    assert op.op._schema == torch._C.parse_schema(f"{ns}::{row.id}{row.schema}")
    via_class = op(*row.args, **row.kwargs)
    via_torch_ops = torch_op(ns, row.id)(*row.args, **row.kwargs)
    assert_same(via_class, row.expected)
    assert_same(via_torch_ops, row.expected)


def test_schema_strings_are_parseable_by_torch() -> None:
    """The expected strings themselves are valid dispatcher schemas (guards typos in the table)."""
    for row in ROWS:
        parsed = torch._C.parse_schema(f"x::{row.id}{row.schema}")
        assert parsed.name == f"x::{row.id}"


# --------------------------------------------------------------------------- from __future__ import annotations


def _load_future_ops() -> ModuleType:
    name = "_opclass_test_future_ops"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_future_ops.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_future_annotations(ns: str) -> None:
    module = _load_future_ops()
    assert module.annotations.compiler_flag  # the module really uses postponed annotations
    ops = module.define_future_ops(ns)
    scale, split = ops["scale"], ops["split"]
    assert isinstance(scale.cpu.__annotations__["x"], str)
    assert scale.schema == (
        "(Tensor x, Tensor? bias, SymInt[] shape, ScalarType dtype=float64, *, float alpha=2.0, Tensor? other=None) -> Tensor"
    )
    assert split.schema == "(Tensor x, SymInt n) -> (Tensor, Tensor[], SymInt)"

    expected = (X * 2).reshape(2, 3).double() + X23
    assert_same(scale(X, X, [2, 3]), expected)
    assert_same(torch_op(ns, "future_scale")(X, X, [2, 3]), expected)
    assert_same(scale(X, None, [3, 2], torch.float32, alpha=1.0, other=X), (X + X).reshape(3, 2))
    expected_split = (X + 2, [X * 0, X * 1], 6)
    assert_same(split(X, 2), expected_split)
    assert_same(torch_op(ns, "future_split")(X, 2), expected_split)
    # The string-annotated abstract kernel is used under FakeTensor too.
    with FakeTensorMode() as mode:
        fake = scale(mode.from_tensor(X), None, [3, 2])
    assert fake.shape == (3, 2) and fake.dtype == torch.float64


# --------------------------------------------------------------------------- explicit schema=


def test_explicit_schema_with_unannotated_kernels(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale", schema="(Tensor x, float s=2.0, *, Tensor? bias=None) -> Tensor"):
        @staticmethod
        def cpu(x, s=2.0, *, bias=None):  # type: ignore[no-untyped-def]
            return x * s if bias is None else x * s + bias

        @staticmethod
        def abstract(x, s=2.0, *, bias=None):  # type: ignore[no-untyped-def]
            return torch.empty_like(x)

    assert Scale.schema == "(Tensor x, float s=2.0, *, Tensor? bias=None) -> Tensor"
    assert_same(Scale(X), X * 2)
    assert_same(Scale(X, 3.0, bias=X), X * 4)
    assert_same(torch_op(ns, "scale")(X, 3.0, bias=X), X * 4)
    assert inspect.signature(Scale) == inspect.Signature(
        [
            inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Tensor),
            inspect.Parameter("s", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=2.0, annotation=float),
            inspect.Parameter("bias", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[Tensor]),
        ],
        return_annotation=Tensor,
    )


def test_explicit_mutating_schema_with_unannotated_kernel(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", schema="(Tensor x, Tensor(a!) out) -> ()", mutates_args=("out",)):
        @staticmethod
        def cpu(x, out):  # type: ignore[no-untyped-def]
            out.add_(x)

    assert AddInto.schema == "(Tensor x, Tensor(a!) out) -> ()"
    assert AddInto.op._schema.is_mutable
    out = torch.zeros(6)
    assert AddInto(X, out) is None
    torch_op(ns, "add_into")(X, out)
    assert_same(out, X * 2)


def test_explicit_schema_agreeing_with_annotations(ns: str) -> None:
    class Lerp(CustomOp, name=f"{ns}::lerp", schema="(Tensor a, Tensor b, float w=0.5) -> Tensor"):
        @staticmethod
        def cpu(a: Tensor, b: Tensor, w: float = 0.5) -> Tensor:
            return a + (b - a) * w

    assert Lerp.schema == "(Tensor a, Tensor b, float w=0.5) -> Tensor"
    assert_same(Lerp(X, X + 2), X + 1)
    assert_same(torch_op(ns, "lerp")(X, X + 4, 0.25), X + 1)


# --------------------------------------------------------------------------- nested string annotations, GroupName, partly annotated hooks


def test_nested_string_annotations_are_evaluated(ns: str) -> None:
    class Nested(CustomOp, name=f"{ns}::nested"):
        @staticmethod
        def default(xs: list["Tensor"], y: Optional["Tensor"], zs: List["Tensor"], w: "Optional[Tensor]" = None) -> list["Tensor"]:
            return [x + 1 for x in xs]

    assert Nested.schema == "(Tensor[] xs, Tensor? y, Tensor[] zs, Tensor? w=None) -> Tensor[]"
    assert_paths_agree_on(Nested, [torch.ones(2)], None, [])


def test_group_name_is_a_str(ns: str) -> None:
    if GroupName is None:
        pytest.skip("torch.distributed is not available")

    class Grouped(CustomOp, name=f"{ns}::grouped"):
        @staticmethod
        def default(x: Tensor, group: GroupName, other: Optional[GroupName] = None) -> Tensor:
            return x * len(group)

    assert Grouped.schema == "(Tensor x, str group, str? other=None) -> Tensor"
    seen = assert_paths_agree_on(Grouped, torch.ones(2), "abc")
    assert seen["output"]["values"].tolist() == [3.0, 3.0]


def test_partly_annotated_abstract_takes_the_kernels_schema(ns: str) -> None:
    class Zeros(CustomOp, name=f"{ns}::zeros"):
        @staticmethod
        def cpu(x: Tensor, shape: list[int]) -> Tensor:
            return x.new_zeros(shape)

        @staticmethod
        def abstract(x, shape) -> Tensor:  # as torch's custom_op_db writes fake kernels
            return x.new_empty(shape)

    assert Zeros.schema == "(Tensor x, SymInt[] shape) -> Tensor"
    assert_paths_agree_on(Zeros, torch.ones(1), [2, 3])
    torch.library.opcheck(Zeros.op, (torch.ones(1), [2, 3]))


# --------------------------------------------------------------------------- mutation, Tag.inplace, Tag.out


def k_write_out(x: Tensor, out: Tensor) -> None:
    out.copy_(x * 2)


def k_write_many(a: Tensor, b: Tensor, c: Optional[Tensor], d: list[Tensor]) -> None:
    a.add_(b)
    if c is not None:
        c.sub_(b)


def k_write_list(a: Tensor, d: list[Tensor]) -> None:
    for t in d:
        t.add_(a)


@pytest.mark.parametrize(
    ("kernel", "mutates", "schema"),
    [
        (k_write_out, ("out",), "(Tensor x, Tensor(a1!) out) -> ()"),
        (k_write_many, ("a", "c"), "(Tensor(a0!) a, Tensor b, Tensor(a2!)? c, Tensor[] d) -> ()"),
        (k_write_many, ["c", "a", "c"], "(Tensor(a0!) a, Tensor b, Tensor(a2!)? c, Tensor[] d) -> ()"),
        (k_write_list, ("d",), "(Tensor a, Tensor(a1!)[] d) -> ()"),
    ],
    ids=["one", "several", "list_with_repeat", "tensor_list"],
)
def test_mutates_args_alias_annotations(ns: str, kernel: Callable[..., Any], mutates: Sequence[str], schema: str) -> None:
    op = define(ns, "mut", kernel, mutates_args=mutates)
    assert op.schema == schema
    assert op.op._schema.is_mutable


def test_mutating_op_writes_and_bumps_version(ns: str) -> None:
    op = define(ns, "write_out", k_write_out, mutates_args=("out",))
    out = torch.zeros(6)
    version = out._version
    assert op(X, out) is None
    assert_same(out, X * 2)
    assert out._version > version
    torch_op(ns, "write_out")(X + 1, out)
    assert_same(out, (X + 1) * 2)


@needs_tag("inplace")
def test_tag_inplace_schema(ns: str) -> None:
    class AddOne_(CustomOp, name=f"{ns}::add_one_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor, amount: float = 1.0) -> Tensor:
            return x.add_(amount)

    assert AddOne_.schema == "(Tensor(a0!) x, float amount=1.0) -> Tensor(a0!)"
    assert torch.Tag.inplace in AddOne_.op.tags
    t = torch.zeros(3)
    assert AddOne_(t) is t
    assert torch_op(ns, "add_one_")(t, 2.0) is t
    assert_same(t, torch.full((3,), 3.0))


@needs_tag("out")
def test_tag_out_schema(ns: str) -> None:
    class SinOut(CustomOp, name=f"{ns}::sin_out", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            return torch.sin(x, out=out)

    assert SinOut.schema == "(Tensor x, *, Tensor(a1!) out) -> Tensor(a1!)"
    assert torch.Tag.out in SinOut.op.tags
    out = torch.empty(6)
    assert SinOut(X, out=out) is out
    assert_same(out, torch.sin(X))
    out2 = torch.empty(6)
    assert torch_op(ns, "sin_out")(X + 1, out=out2) is out2
    assert_same(out2, torch.sin(X + 1))


@needs_tag("out")
def test_tag_out_two_outputs_schema(ns: str) -> None:
    class MinMaxOut(CustomOp, name=f"{ns}::minmax_out", mutates_args=("lo", "hi"), tags=[torch.Tag.out]):
        @staticmethod
        def cpu(x: Tensor, *, lo: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
            lo.fill_(x.min())
            hi.fill_(x.max())
            return lo, hi

    assert MinMaxOut.schema == "(Tensor x, *, Tensor(a1!) lo, Tensor(a2!) hi) -> (Tensor(a1!), Tensor(a2!))"
    lo, hi = torch.empty(()), torch.empty(())
    got = MinMaxOut(X, lo=lo, hi=hi)
    assert got[0] is lo and got[1] is hi
    assert (lo.item(), hi.item()) == (0.0, 5.0)


# --------------------------------------------------------------------------- inspect.signature


def k_signature(
    x: Tensor,
    n: int = 3,
    bias: Optional[Tensor] = None,
    dtype: torch.dtype = torch.float32,
    device: Optional[torch.device] = None,
    *,
    alpha: float = 1.0,
    mode: str = "sum",
    flags: list[bool],
) -> tuple[Tensor, Tensor]:
    y = x * n * alpha
    if bias is not None:
        y = y + bias
    return y.to(dtype), torch.tensor(flags, dtype=dtype)


def test_signature_matches_op_and_kernel(ns: str) -> None:
    op = define(ns, "sig", k_signature)
    P = inspect.Parameter
    expected = inspect.Signature(
        [
            P("x", P.POSITIONAL_OR_KEYWORD, annotation=Tensor),
            P("n", P.POSITIONAL_OR_KEYWORD, default=3, annotation=int),
            P("bias", P.POSITIONAL_OR_KEYWORD, default=None, annotation=Optional[Tensor]),
            P("dtype", P.POSITIONAL_OR_KEYWORD, default=torch.float32, annotation=torch.dtype),
            P("device", P.POSITIONAL_OR_KEYWORD, default=None, annotation=Optional[torch.device]),
            P("alpha", P.KEYWORD_ONLY, default=1.0, annotation=float),
            P("mode", P.KEYWORD_ONLY, default="sum", annotation=str),
            P("flags", P.KEYWORD_ONLY, annotation=list[bool]),
        ],
        return_annotation=tuple[Tensor, Tensor],
    )
    assert op.schema == (
        '(Tensor x, SymInt n=3, Tensor? bias=None, ScalarType dtype=float32, Device? device=None, *, '
        'float alpha=1.0, str mode="sum", bool[] flags) -> (Tensor, Tensor)'
    )
    assert inspect.signature(op) == expected
    # Written with canonical annotations, the kernel's own signature is the op's signature.
    assert inspect.signature(op) == inspect.signature(k_signature)
    # The class call honours it: keywords by name, defaults filled in, keyword-only enforced.
    got = op(x=X, flags=[True], alpha=2.0)
    assert_same(got, ((X * 6).float(), torch.tensor([1.0])))
    with pytest.raises((TypeError, RuntimeError), match="positional"):
        op(X, 3, None, torch.float32, None, 1.0, "sum", [True])


def test_signature_of_single_tuple_return(ns: str) -> None:
    op = define(ns, "single", k_single_tuple_return)
    assert inspect.signature(op).return_annotation == tuple[Tensor]


@pytest.mark.parametrize("row", [r for r in ROWS if r.id in ("tuple_int", "sequence_tensor", "defaults_omitted", "number_int")], ids=lambda r: r.id)
def test_signature_normalises_sequence_annotations(ns: str, row: Row) -> None:
    """Sequence[T] / tuple[T, ...] parameters show up as list[T]: what the dispatcher passes."""
    op = define(ns, row.id, row.kernel)
    sig = inspect.signature(op)
    kernel_sig = inspect.signature(row.kernel)
    assert list(sig.parameters) == list(kernel_sig.parameters)
    for name, p in sig.parameters.items():
        k = kernel_sig.parameters[name]
        assert p.kind == k.kind
        assert p.default == k.default or (isinstance(k.default, tuple) and tuple(p.default) == k.default)
    if row.id == "tuple_int":
        assert sig.parameters["dims"].annotation == list[int]
    if row.id == "sequence_tensor":
        assert sig.parameters["xs"].annotation == list[Tensor]
    if row.id == "number_int":
        assert sig.parameters["alpha"].annotation == torch.types.Number


# --------------------------------------------------------------------------- names


def test_overload_name(ns: str) -> None:
    class Mul(CustomOp, name=f"{ns}::mul"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x * y

    class MulScalar(CustomOp, name=f"{ns}::mul.Scalar"):
        @staticmethod
        def cpu(x: Tensor, y: float) -> Tensor:
            return x * y + 1000

    assert MulScalar.qualname == f"{ns}::mul.Scalar"
    assert MulScalar.op is torch_op(ns, "mul").Scalar
    assert MulScalar.op._overloadname == "Scalar"
    assert Mul.op is torch_op(ns, "mul").default
    assert MulScalar.schema == "(Tensor x, float y) -> Tensor"
    assert_same(MulScalar(X, 2.0), X * 2 + 1000)
    assert_same(torch_op(ns, "mul").Scalar(X, 2.0), X * 2 + 1000)
    assert_same(Mul(X, X), X * X)
    # The packet resolves the overload from the arguments.
    assert_same(torch_op(ns, "mul")(X, X), X * X)
    assert_same(torch_op(ns, "mul")(X, 2.0), X * 2 + 1000)


def test_overload_named_default_is_the_default_overload(ns: str) -> None:
    op = define(ns, "neg.default", k_tensor)
    assert op.qualname == f"{ns}::neg"
    assert op.op is torch_op(ns, "neg").default


@pytest.mark.parametrize(
    ("cls_name", "op_name"),
    [("FusedAdd", "fused_add"), ("HTTPRequest", "http_request"), ("MyOpV2", "my_op_v2"), ("Relu", "relu"), ("getX", "get_x")],
)
def test_snake_case_name_under_inherited_namespace(ns: str, cls_name: str, op_name: str) -> None:
    class Base(CustomOp, namespace=ns):
        """An abstract base: no kernel, so no op."""

    op = OpMeta(cls_name, (Base,), {"default": staticmethod(k_tensor), "__qualname__": cls_name})
    assert op.qualname == f"{ns}::{op_name}"
    assert op.schema == "(Tensor x) -> Tensor"
    assert_same(op(X), X * 2)
    assert_same(torch_op(ns, op_name)(X), X * 2)
    with pytest.raises(TypeError, match="abstract op base"):
        Base(X)


def test_bare_name_and_deeper_namespace_inheritance(ns: str) -> None:
    class Base(CustomOp, namespace=ns):
        pass

    class Middle(Base):
        pass

    class Named(Middle, name="explicit_name"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    class AutoNamed(Middle):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 2

    assert Named.qualname == f"{ns}::explicit_name"
    assert AutoNamed.qualname == f"{ns}::auto_named"
    assert_same(torch_op(ns, "explicit_name")(X), X + 1)
    assert_same(torch_op(ns, "auto_named")(X), X + 2)


# --------------------------------------------------------------------------- variants


def test_variant_inherits_hooks_and_schema(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, s: float = 2.0) -> Tensor:
            return x * s

        @staticmethod
        def abstract(x: Tensor, s: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            ctx.s = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            return grad * ctx.s, None

    class FastScale(Scale, name=f"{ns}::fast_scale"):
        @staticmethod
        def cpu(x, s=2.0):  # type: ignore[no-untyped-def]  # unannotated: keeps Scale's schema
            return x * s + 100

    class SameScale(Scale, name=f"{ns}::same_scale"):
        """Nothing overridden: a second op with the same hooks."""

    for op, name, offset in ((FastScale, "fast_scale", 100), (SameScale, "same_scale", 0)):
        assert op.qualname == f"{ns}::{name}"
        assert op.schema == Scale.schema == "(Tensor x, float s=2.0) -> Tensor"
        assert_same(op(X), X * 2 + offset)
        assert_same(torch_op(ns, name)(X, 3.0), X * 3 + offset)
        # backward and setup_context are inherited ...
        x = X.clone().requires_grad_()
        op(x, 3.0).sum().backward()
        assert_same(x.grad, torch.full_like(X, 3.0))
        # ... and so is abstract: without it the generated fake kernel raises.
        with FakeTensorMode() as mode:
            fake = op(mode.from_tensor(X23))
        assert fake.shape == (2, 3)
    # The base op is untouched by its variants.
    assert Scale.qualname == f"{ns}::scale"
    assert_same(Scale(X), X * 2)
    assert_same(torch_op(ns, "scale")(X), X * 2)


def test_variant_reannotating_kernels_gets_new_schema(ns: str) -> None:
    class Base(CustomOp, name=f"{ns}::base_op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    class Wider(Base, name=f"{ns}::wider_op"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x + y

    assert Base.schema == "(Tensor x) -> Tensor"
    assert Wider.schema == "(Tensor x, Tensor y) -> Tensor"
    assert_same(Wider(X, X), X * 2)
    assert_same(Base(X), X + 1)


# --------------------------------------------------------------------------- as torch.library writes it


def test_a_tensor_defaulting_to_none_gets_custom_ops_schema(ns: str) -> None:
    """``b: Tensor = None`` is ``Tensor b=None`` (torch's infer_schema), not ``Tensor? b=None``:
    the same schema, values, errors, compile, export and opcheck as the custom_op twin."""
    from _twins import failures, outcome, seen

    def body(x: Tensor, b: Tensor = None) -> Tensor:  # type: ignore[assignment]
        return x * 2 if b is None else x + b

    class AddOrDouble(CustomOp, name=f"{ns}::add_or_double"):
        default = staticmethod(body)

    twin = torch.library.custom_op(f"{ns}_twin::add_or_double", mutates_args=())(body)
    twin.register_fake(lambda x, b=None: torch.empty_like(x))
    try:
        calls = [
            lambda: ((torch.arange(3.0),), {}),
            lambda: ((torch.arange(3.0), None), {}),
            lambda: ((torch.arange(3.0), torch.ones(3)), {}),
            lambda: ((torch.arange(3.0),), {"b": torch.ones(3)}),
        ]
        mine, theirs = seen(AddOrDouble, calls), seen(twin, calls)
        assert mine == theirs
        assert mine["schema"] == "(Tensor x, Tensor b=None) -> Tensor"
        assert not failures(mine), failures(mine)
        assert mine["eager 0"] == (torch.float32, [0.0, 2.0, 4.0]) and mine["eager 3"] == (torch.float32, [1.0, 2.0, 3.0])
        errors = [outcome(lambda: op(torch.arange(3.0), torch.ones(2))) for op in (AddOrDouble, twin)]  # the kernel's own
        assert errors[0] == errors[1] and errors[0][0] == "RuntimeError"
        assert_paths_agree_on(AddOrDouble, torch.arange(3.0))
        assert_paths_agree_on(AddOrDouble, torch.arange(3.0), None)
        assert_paths_agree_on(AddOrDouble, torch.arange(3.0), torch.ones(3))
        x = torch.arange(3.0, requires_grad=True)
        assert AddOrDouble(x).grad_fn is not None and AddOrDouble(x, x).tolist() == [0.0, 2.0, 4.0]

        class Optional_(CustomOp, name=f"{ns}::optional"):
            @staticmethod
            def default(x: Tensor, b: Optional[Tensor] = None) -> Tensor:
                return x.clone()

        assert Optional_.schema == "(Tensor x, Tensor? b=None) -> Tensor"  # as infer_schema: a different schema
    finally:
        twin._lib._destroy()


def test_tags_are_exactly_the_given_ones_with_pt2_compliant_false(ns: str) -> None:
    """Every op gets pt2_compliant_tag, as custom_op gives it; pt2_compliant=False defines the op
    with tags= alone, as Library.define(..., tags=) does, and torch.compile with
    only_allow_pt2_compliant_ops refuses both alike."""
    import torch._dynamo

    lib = torch.library.Library(f"{ns}_twin", "FRAGMENT")
    custom: Any = None
    try:
        lib.define("plain(Tensor x) -> Tensor")
        lib.define("strided(Tensor x) -> Tensor", tags=(torch.Tag.needs_fixed_stride_order,))
        for name in ("plain", "strided"):
            lib.impl(name, lambda x: x + 1, "CompositeExplicitAutograd")
        def body(x: Tensor) -> Tensor:
            return x + 1

        custom = torch.library.custom_op(f"{ns}_twin::custom", mutates_args=())(body)
        custom.register_fake(lambda x: torch.empty_like(x))

        Plain = type("Plain", (CustomOp,), {"default": staticmethod(body)}, name=f"{ns}::plain", pt2_compliant=False)
        Strided = type("Strided", (CustomOp,), {"default": staticmethod(body)}, name=f"{ns}::strided", pt2_compliant=False, tags=torch.Tag.needs_fixed_stride_order)
        Default = type("Default", (CustomOp,), {"default": staticmethod(body)}, name=f"{ns}::default_tags")
        twins = {Plain: getattr(torch.ops, f"{ns}_twin").plain.default, Strided: getattr(torch.ops, f"{ns}_twin").strided.default, Default: custom._opoverload}
        for op, twin in twins.items():
            assert sorted(map(str, op.op.tags)) == sorted(map(str, twin.tags)), op
            outcomes = []
            for fn in (op, twin):
                torch.compiler.reset()
                with torch._dynamo.config.patch(only_allow_pt2_compliant_ops=True):
                    try:
                        outcomes.append(torch.compile(lambda x: fn(x), backend="eager", fullgraph=True)(torch.zeros(2)).tolist())
                    except Exception as e:  # noqa: BLE001 - compared
                        outcomes.append(("refused", "non-PT2-compliant op" in str(e)))
            assert outcomes[0] == outcomes[1], (op, outcomes)
            assert (outcomes[0] == ("refused", True)) is (op is not Default)
        assert Plain.record.tags == () and tuple(Plain.op.tags) == ()
        assert list(Strided.op.tags) == [torch.Tag.needs_fixed_stride_order]
        torch.library.opcheck(Plain.op, (torch.zeros(2),))
    finally:
        torch.compiler.reset()
        if custom is not None:
            custom._lib._destroy()
        lib._destroy()
