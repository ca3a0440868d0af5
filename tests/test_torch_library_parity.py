"""Behaviours users of ``torch.library.custom_op`` expect (issue 17), each as op classes do it.

Where a behaviour concerns calls, every call path (:func:`opclass._harness.call_paths`) must
observe the same as ``torch.ops``.
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional

import pytest
import torch
from torch import Tensor

from torch.utils._pytree import tree_map_only

from opclass import CustomOp, OpDefinitionError

if torch.distributed.is_available():
    from torch.distributed.distributed_c10d import GroupName
else:
    GroupName = None
from opclass._harness import call_paths

from _paths import assert_paths_agree as agree
from _versions import needs_tag


def assert_paths_agree(op: Any, *args: Any) -> dict[str, Any]:
    """Each path gets its own copies of ``args`` (Tensors in lists included); the dispatcher's
    observation."""

    def fresh() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return tuple(tree_map_only(Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), args)), {}

    return list(agree(op, fresh).values())[-1]


# --------------------------------------------------------------------------- mutates_args


def test_mutates_args_from_a_generator(ns: str) -> None:
    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=(n for n in ["out"])):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)

    assert Fill.schema == "(Tensor x, Tensor(a1!) out) -> ()"

    class Variant(Fill, name=f"{ns}::fill_variant"):
        pass  # inherits the keyword: the generator was read once, for both

    assert Variant.schema == "(Tensor x, Tensor(a1!) out) -> ()"
    out = torch.zeros(2)
    Fill(torch.ones(2), out)
    assert out.tolist() == [1.0, 1.0] and out._version == 2  # copy_ and opclass's bump, as via torch.ops
    assert_paths_agree(Fill, torch.ones(2), torch.zeros(2))


def test_mutates_args_unknown_marks_every_tensor_argument(ns: str) -> None:
    class Anything(CustomOp, name=f"{ns}::anything", mutates_args="unknown"):
        @staticmethod
        def cpu(x: Tensor, ys: list[Tensor], z: Optional[Tensor], k: float) -> None:
            x.add_(k)

    expected = torch.library.infer_schema(Anything.record.kernel_for("cpu").user, mutates_args="unknown")
    assert Anything.schema == expected == "(Tensor(a0!) x, Tensor(a1!)[] ys, Tensor(a2!)? z, float k) -> ()"
    seen = assert_paths_agree(Anything, torch.zeros(2), [torch.ones(1)], None, 2.0)
    assert seen["inputs_after"][0]["values"].tolist() == [2.0, 2.0]
    assert seen["inputs_after"][0]["version"] == 2  # add_ and the bump every written argument gets


def test_mutates_args_unknown_with_a_schema(ns: str) -> None:
    class Explicit(CustomOp, name=f"{ns}::explicit", mutates_args="unknown", schema="(Tensor(a!) x) -> ()"):
        @staticmethod
        def cpu(x):
            x.zero_()

    assert Explicit.schema == "(Tensor(a!) x) -> ()"


# --------------------------------------------------------------------------- tags with schema=


@pytest.mark.parametrize(
    ("schema", "tag_name", "problem"),
    [
        pytest.param("(Tensor(a!) x, Tensor y) -> Tensor", "inplace", "Tag.inplace needs the op to return its first argument", marks=needs_tag("inplace")),
        pytest.param(
            "(Tensor x, Tensor(a!) y) -> Tensor(a!)", "inplace", "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", marks=needs_tag("inplace")
        ),
        pytest.param("(Tensor x, *, Tensor(a!) out) -> Tensor", "out", "Tag.out needs the op to return its out arguments, in order", marks=needs_tag("out")),
        pytest.param("(Tensor x, Tensor(a!) out) -> Tensor(a!)", "out", "Tag.out needs the mutated arguments to be keyword-only Tensors", marks=needs_tag("out")),
        pytest.param(
            "(Tensor x, *, Tensor(a!) o1, Tensor(b!) o2) -> (Tensor(b!), Tensor(a!))",
            "out",
            "Tag.out needs the op to return its out arguments, in order",
            marks=needs_tag("out"),
        ),
    ],
)
def test_explicit_schema_breaking_tag_rules_is_a_definition_error(ns: str, schema: str, tag_name: str, problem: str) -> None:
    tag = getattr(torch.Tag, tag_name)
    mutated = [part.split()[-1] for part in schema[1 : schema.index(")")].split(",") if "!" in part]
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad", schema=schema, mutates_args=mutated, tags=tag):
            @staticmethod
            def default(*args, **kwargs):
                return args[0]

    assert info.value.problem == f"schema={schema!r}: {problem}"
    assert str(info.value).startswith("class Bad: ")
    assert not hasattr(torch.ops, ns) or not hasattr(getattr(torch.ops, ns), "bad")


@needs_tag("inplace", "out")
def test_explicit_schema_following_tag_rules_works(ns: str) -> None:
    class Scale_(CustomOp, name=f"{ns}::scale_", schema="(Tensor(a!) x, float k) -> Tensor(a!)", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def default(x, k):
            return x.mul_(k)

    class AddOut(CustomOp, name=f"{ns}::add_out", schema="(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def default(x, *, out):
            return out.copy_(x + 1)

    x = torch.ones(2)
    assert Scale_(x, 3.0) is x and x.tolist() == [3.0, 3.0]
    out = torch.empty(2)
    assert AddOut(torch.ones(2), out=out) is out and out.tolist() == [2.0, 2.0]
    assert_paths_agree(Scale_, torch.ones(2), 3.0)


# --------------------------------------------------------------------------- abstract on generated fakes


@pytest.mark.parametrize("tag_name", [pytest.param("inplace", marks=needs_tag("inplace")), pytest.param("out", marks=needs_tag("out"))])
def test_abstract_on_inplace_or_out_op_warns_naming_the_class(ns: str, tag_name: str) -> None:
    tag = getattr(torch.Tag, tag_name)
    with pytest.warns(UserWarning) as record:
        if tag is torch.Tag.inplace:

            class Needless(CustomOp, name=f"{ns}::needless", mutates_args=("x",), tags=tag):
                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return x.mul_(2)

                @staticmethod
                def abstract(x: Tensor) -> Tensor:
                    return x

        else:

            class Needless(CustomOp, name=f"{ns}::needless", mutates_args=("out",), tags=tag):  # type: ignore[no-redef]
                @staticmethod
                def default(x: Tensor, *, out: Tensor) -> Tensor:
                    return out.copy_(x)

                @staticmethod
                def abstract(x: Tensor, *, out: Tensor) -> Tensor:
                    return out

    messages = [str(w.message) for w in record if "unnecessary" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in record]
    assert messages[0].startswith("Needless.abstract(x: Tensor")
    assert f"an op tagged torch.Tag.{tag.name}" in messages[0] and messages[0].endswith("remove it")
    assert record[0].filename == __file__  # points at the user's def


def test_abstract_on_functional_op_does_not_warn(ns: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Fine(CustomOp, name=f"{ns}::fine"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x + 1

            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)


# --------------------------------------------------------------------------- types


def test_nested_string_annotations_are_evaluated(ns: str) -> None:
    class Nested(CustomOp, name=f"{ns}::nested"):
        @staticmethod
        def default(xs: list["Tensor"], y: Optional["Tensor"], zs: List["Tensor"], w: "Optional[Tensor]" = None) -> list["Tensor"]:
            return [x + 1 for x in xs]

    assert Nested.schema == "(Tensor[] xs, Tensor? y, Tensor[] zs, Tensor? w=None) -> Tensor[]"
    assert_paths_agree(Nested, [torch.ones(2)], None, [])


def test_group_name_is_a_str(ns: str) -> None:
    if GroupName is None:
        pytest.skip("torch.distributed is not available")

    class Grouped(CustomOp, name=f"{ns}::grouped"):
        @staticmethod
        def default(x: Tensor, group: GroupName, other: Optional[GroupName] = None) -> Tensor:
            return x * len(group)

    assert Grouped.schema == "(Tensor x, str group, str? other=None) -> Tensor"
    seen = assert_paths_agree(Grouped, torch.ones(2), "abc")
    assert seen["output"]["values"].tolist() == [3.0, 3.0]


def test_unresolvable_nested_string_is_a_definition_error(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(xs: list["Tensr"]) -> Tensor:  # noqa: F821 - the typo is the subject
                return xs[0].clone()

    assert "of 'xs' cannot be evaluated (NameError: name 'Tensr' is not defined)" in info.value.problem


# --------------------------------------------------------------------------- defaults reach the kernel


def test_kernel_sees_the_same_defaults_on_every_path(ns: str) -> None:
    """The dispatcher leaves out arguments equal to their default, so the kernel's own default
    applies; an op whose kernel defaults differ from the schema's has no fast path."""
    seen: list[Any] = []

    class Where(CustomOp, name=f"{ns}::where"):
        @staticmethod
        def cpu(x: Tensor, device: torch.device = "cpu") -> Tensor:  # type: ignore[assignment]
            seen.append(device)
            return x.clone()

    for fn in call_paths(Where).values():
        fn(torch.ones(1))
        fn(torch.ones(1), torch.device("cpu"))  # equal to the default: left out as well
    assert seen == ["cpu"] * 2 * len(call_paths(Where))
    assert Where.record.plan.off == f"{ns}::where (Where.cpu) has default 'cpu' for 'device' where the schema's is device(type='cpu')"


def test_matching_defaults_keep_the_fast_path(ns: str) -> None:
    class Same(CustomOp, name=f"{ns}::same"):
        @staticmethod
        def cpu(x: Tensor, k: float = 2.0, sizes: list[int] = [1, 2], dtype: torch.dtype = torch.float32) -> Tensor:  # noqa: B006
            return x * k

    assert Same.record.plan.off is None
    assert_paths_agree(Same, torch.ones(2))


def test_kernel_without_the_schemas_default_is_a_definition_error(ns: str) -> None:
    """The dispatcher would leave ``k`` out: the kernel needs its own default."""
    with pytest.raises(OpDefinitionError, match=r"parameter 'k' needs a default \(the schema gives k=2.0\)"):

        class NoDefault(CustomOp, name=f"{ns}::no_default", schema="(Tensor x, float k=2.0) -> Tensor"):
            @staticmethod
            def cpu(x, k):
                return x * k


# --------------------------------------------------------------------------- torch.compile(MyOp)


def test_compiling_an_op_class_is_a_clear_error_and_changes_nothing(ns: str) -> None:
    class Plus(CustomOp, name=f"{ns}::plus"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    with pytest.raises(TypeError, match=r"torch.compile\(Plus\) cannot compile an op class: .* torch.compile\(lambda x: Plus\(x\)\)"):
        torch.compile(Plus, fullgraph=True)
    assert "__call__" not in vars(Plus)
    compiled = torch.compile(lambda x: Plus(x), backend="aot_eager", fullgraph=True)
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]


# --------------------------------------------------------------------------- backward in torch's convention


def _scale(ns: str, grads: str) -> Any:
    class Scale(CustomOp, name=f"{ns}::scale_{grads}"):
        @staticmethod
        def cpu(x: Tensor, k: float = 2.0, bias: Optional[Tensor] = None) -> Tensor:
            return x * k if bias is None else x * k + bias

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            if grads == "passed":  # custom_op code: one gradient per argument passed
                return (grad * ctx.k,)[: len(ctx.needs_input_grad)]
            return grad * ctx.k, None, grad if ctx.needs_input_grad[2] else None

    return Scale


@pytest.mark.parametrize("grads", ["passed", "all"])
def test_backward_may_return_gradients_for_the_passed_arguments_only(ns: str, grads: str) -> None:
    op = _scale(ns, grads)
    seen = assert_paths_agree(op, torch.ones(2, requires_grad=True))
    assert seen["grads"][0]["values"].tolist() == [2.0, 2.0]
    # k equal to its default counts as not passed, as the dispatcher counts it.
    seen = assert_paths_agree(op, torch.ones(2, requires_grad=True), 2.0)
    assert seen["grads"][0]["values"].tolist() == [2.0, 2.0]
    if grads == "all":
        seen = assert_paths_agree(op, torch.ones(2, requires_grad=True), 3.0)
        assert seen["grads"][0]["values"].tolist() == [3.0, 3.0]


def test_backward_returns_one_gradient_per_argument_passed_or_per_input(ns: str) -> None:
    """custom_op accepts those two counts; any other is most often a slip in backward."""
    op = _scale(ns, "passed")  # one gradient, where x and k are passed
    seen = assert_paths_agree(op, torch.ones(2, requires_grad=True), 3.0)
    assert seen["backward"] == (
        "RuntimeError",
        f"{ns}::scale_passed (Scale.backward) returned 1 gradients; expected one per argument passed (2) or one per "
        "positional input (3): return None for an input with no gradient",
    )


def test_a_missing_gradient_for_an_input_that_needs_one_is_an_error(ns: str) -> None:
    op = _scale(ns, "passed")
    seen = assert_paths_agree(op, torch.ones(2, requires_grad=True), 3.0, torch.ones(2, requires_grad=True))
    assert seen["backward"][0] == "RuntimeError"
    assert "(Scale.backward) returned 1 gradients; expected one per positional input (3)" in seen["backward"][1]


# --------------------------------------------------------------------------- partly annotated hooks


def test_partly_annotated_abstract_takes_the_kernels_schema(ns: str) -> None:
    class Zeros(CustomOp, name=f"{ns}::zeros"):
        @staticmethod
        def cpu(x: Tensor, shape: list[int]) -> Tensor:
            return x.new_zeros(shape)

        @staticmethod
        def abstract(x, shape) -> Tensor:  # as torch's custom_op_db writes fake kernels
            return x.new_empty(shape)

    assert Zeros.schema == "(Tensor x, SymInt[] shape) -> Tensor"
    assert_paths_agree(Zeros, torch.ones(1), [2, 3])
    torch.library.opcheck(Zeros.op, (torch.ones(1), [2, 3]))


@pytest.mark.parametrize(
    ("signature", "problem"),
    [
        ("(x, shape: list[float]) -> Tensor", "parameter 'shape' is annotated float[], but the op's schema says List[int]"),
        ("(x, shape) -> list[Tensor]", "the return is annotated Tensor[], but the op returns Tensor"),
        ("(x, size) -> Tensor", "its parameters (x, size) do not match the op's (x, shape)"),
    ],
)
def test_partly_annotated_hook_must_agree_with_the_schema(ns: str, signature: str, problem: str) -> None:
    scope: dict[str, Any] = {"CustomOp": CustomOp, "Tensor": Tensor}
    with pytest.raises(OpDefinitionError) as info:
        exec(  # noqa: S102 - the signature is the subject
            f"class Bad(CustomOp, name='{ns}::bad'):\n"
            f"    @staticmethod\n"
            f"    def cpu(x: Tensor, shape: list[int]) -> Tensor:\n"
            f"        return x.new_zeros(shape)\n"
            f"    @staticmethod\n"
            f"    def abstract{signature}:\n"
            f"        return x\n",
            scope,
        )
    assert problem in info.value.problem
    assert info.value.hook == "abstract"


def test_a_gradient_for_a_left_out_argument_is_an_error_on_every_path(ns: str) -> None:
    """A non-None gradient for an argument that is no Tensor (bias left at None): torch's error."""

    class Shift(CustomOp, name=f"{ns}::shift"):
        @staticmethod
        def cpu(x: Tensor, bias: Optional[Tensor] = None) -> Tensor:
            return x.clone() if bias is None else x + bias

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad, grad  # wrong when bias is None

    seen = assert_paths_agree(Shift, torch.ones(2, requires_grad=True))
    assert seen["backward"] == ("RuntimeError", "function ShiftFunctionBackward returned a gradient different than None at position 2, but the corresponding forward input was not a Variable")


# --------------------------------------------------------------------------- kernels shielded from dynamo


def _nonzero(x: Tensor) -> Tensor:
    import numpy as np

    return torch.from_numpy(np.ascontiguousarray(np.stack(np.nonzero(x.numpy()), axis=1), dtype=np.int64))


def _nonzero_fake(x: Tensor) -> Tensor:
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.int64)


def _graph_breaks(op: Any) -> int:
    import torch._dynamo
    from torch._dynamo.utils import counters

    def f(x: Tensor) -> Tensor:
        y = x * 2
        return op(y).sum() + y.sum()  # a data-dependent output shape: a graph break at the op

    torch._dynamo.reset()
    counters.clear()
    try:
        out = torch.compile(f, backend="aot_eager")(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
        assert out.item() == f(torch.tensor([[0.0, 1.0], [2.0, 0.0]])).item()
        return sum(counters["graph_break"].values())
    finally:
        torch._dynamo.reset()


def test_kernels_run_untraced_after_a_graph_break(ns: str) -> None:
    """After the op's graph break the op runs eagerly; dynamo must not trace into its kernels
    (NumPy code: more graph breaks), on the class call or through the dispatcher, as custom_op."""

    class Nonzero(CustomOp, name=f"{ns}::nonzero"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return _nonzero(x)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return _nonzero_fake(x)

    lib = torch.library.custom_op(f"{ns}::reference_nonzero", mutates_args=())(_reference_nonzero)
    lib.register_fake(_nonzero_fake)
    try:
        expected = _graph_breaks(lib)
        assert expected == 1
        assert _graph_breaks(Nonzero) == expected
        assert _graph_breaks(Nonzero.op) == expected
    finally:
        lib._lib._destroy()


def _reference_nonzero(x: Tensor) -> Tensor:
    return _nonzero(x)
