"""``opclass.testing`` and the ``samples`` hook: check_op passes good ops and names what is wrong with bad ones."""

from __future__ import annotations

import re
import sys
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp, OpDefinitionError
from opclass.testing import Sample, check_op, check_sample, parametrize_samples

from opclass._samples import copy_inputs

from _errors import error_of
from _ops import numpy_doubler
from _versions import needs_tag

# --------------------------------------------------------------------------- module-level ops for parametrize_samples

_NS = "t_testing_helper_params"


class Cube(CustomOp, name=f"{_NS}::cube"):
    @staticmethod
    def default(x: Tensor) -> Tensor:
        return x**3

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x * x * grad

    @staticmethod
    def samples():
        yield Sample((torch.randn(3, requires_grad=True),), name="vector")
        yield Sample((torch.randn(2, 3).t(),), name="transposed")
        yield (torch.randn(()),)


class Fill(CustomOp, name=f"{_NS}::fill", mutates_args=("x",)):
    @staticmethod
    def default(x: Tensor, value: float) -> None:
        x.fill_(value)

    @staticmethod
    def samples():
        return [(torch.zeros(3), 2.0), Sample((torch.ones(2, 2),), {"value": -1.0}, name="keyword")]


def teardown_module() -> None:
    opclass.remove_namespace(_NS)


@parametrize_samples(Cube, Fill)
def test_parametrized_samples_pass(op: Any, sample: Sample, request: pytest.FixtureRequest) -> None:
    assert request.node.callspec.id == f"{op.qualname}[{sample.name}]"
    check_sample(op, sample, test_utils=("test_schema", "test_faketensor"))


def test_parametrize_samples_ids() -> None:
    mark = parametrize_samples(Cube, Fill)
    assert mark.name == "parametrize" and mark.args[0] == ("op", "sample")
    params = mark.args[1]
    assert [p.id for p in params] == [
        f"{_NS}::cube[vector]",
        f"{_NS}::cube[transposed]",
        f"{_NS}::cube[2]",
        f"{_NS}::fill[0]",
        f"{_NS}::fill[keyword]",
    ]
    assert [p.values[0] for p in params] == [Cube, Cube, Cube, Fill, Fill]
    assert all(isinstance(p.values[1], Sample) for p in params)
    assert params[4].values[1].kwargs == {"value": -1.0}


def test_parametrize_samples_needs_samples(ns: str) -> None:
    class NoSamples(CustomOp, name=f"{ns}::no_samples"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    with pytest.raises(ValueError, match=r"no samples: define a samples\(\) static method on NoSamples"):
        parametrize_samples(NoSamples)
    with pytest.raises(TypeError, match="at least one op class"):
        parametrize_samples()


def test_parametrize_samples_suggests_what_it_takes(ns: str) -> None:
    class Inc(CustomOp, name=f"{ns}::inc"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    e = error_of(opclass.testing.parametrize_samples, Inc)
    assert "samples=[...]" in str(e) and "check_op(Inc, samples=[...])" in str(e)
    assert "or pass samples=[...]" not in str(e)
    opclass.testing.check_op(Inc, [(torch.ones(2),)])  # what it suggests works


@pytest.mark.slow
def test_pytest_is_imported_lazily() -> None:
    import subprocess

    code = "import sys, opclass, opclass.testing; print('pytest' in sys.modules, 'torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
    assert "testing" not in opclass.__all__


# --------------------------------------------------------------------------- the samples hook


def test_samples_hook_is_registered_metadata(ns: str) -> None:
    hook = opclass.hooks()["samples"]
    assert not hook.kernel and not hook.backend and hook.staticmethod and hook.requires == ()
    assert list(opclass.hooks())[-4:] == ["samples", "traceable", "providers", "provider_orders"]  # the kernel hooks' followers come last

    def make() -> Iterator[Sample]:
        yield Sample((torch.ones(2),))

    class Twice(CustomOp, name=f"{ns}::twice"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 2 * x

        samples = staticmethod(make)

    class Thrice(Twice, name=f"{ns}::thrice"):  # a variant inherits the samples
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 3 * x

    assert Twice.record.hooks["samples"] is make
    assert Thrice.record.hooks["samples"] is make
    # Metadata only: the op and its calls are as without it.
    assert torch.equal(Twice(torch.ones(2)), torch.full((2,), 2.0))
    assert torch.equal(Twice.op(torch.ones(2)), torch.full((2,), 2.0))

    class NoSamples(CustomOp, name=f"{ns}::none"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x

    assert "samples" not in NoSamples.record.hooks


def test_samples_must_be_a_static_method(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x

            def samples():  # type: ignore[misc]
                return []

    assert info.value.hook == "samples" and info.value.cls_name == "Bad"
    assert "hooks are static methods, but this is a plain function" in str(info.value)
    assert info.value.fix == "add @staticmethod above the def"

    with pytest.raises(OpDefinitionError, match="but this is a classmethod") as info:

        class Bad2(CustomOp, name=f"{ns}::bad2"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x

            @classmethod
            def samples(cls):
                return []

    assert info.value.hook == "samples"
    assert not hasattr(getattr(torch.ops, ns), "bad") and not hasattr(getattr(torch.ops, ns), "bad2")


def test_samples_must_take_no_parameters(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x

            @staticmethod
            def samples(device):
                return [(torch.ones(2, device=device),)]

    e = info.value
    assert e.hook == "samples" and e.cls_name == "Bad"
    assert str(e).startswith("Bad.samples(device): takes (device), but it is called with no arguments")
    assert "write samples() with no parameters" in e.fix
    assert not hasattr(getattr(torch.ops, ns), "bad")

    class Fine(CustomOp, name=f"{ns}::fine"):  # parameters with defaults are fine
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.clone()

        @staticmethod
        def samples(device="cpu"):
            return [(torch.ones(2, device=device),)]

    check_op(Fine, opcheck=False)


def test_sample_dataclass() -> None:
    s = Sample([1, 2], name="n")
    assert s.args == (1, 2) and s.kwargs == {} and s.name == "n"
    assert Sample((1,)) == Sample((1,), {})
    with pytest.raises(Exception):
        s.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"write Sample\(\(x,\)\)"):
        Sample(torch.ones(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kwargs"):
        Sample((), [1])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- check_op on good ops


def test_check_op_functional_with_backward() -> None:
    check_op(Cube)  # every opcheck util, gradcheck, fast path


@needs_tag("inplace")
def test_check_op_mutating(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, y: Tensor) -> None:
            x.add_(y)

        @staticmethod
        def samples():
            yield Sample((torch.zeros(3), torch.randn(3)), name="vector")
            y = torch.randn(2, 2)
            yield Sample((torch.ones(2, 2), y), name="matrix")

    samples = list(AddInto.samples())
    before = [s.args[0].clone() for s in samples]
    check_op(AddInto, samples)
    # Every check ran on copies: the samples themselves are untouched.
    for s, b in zip(samples, before):
        assert torch.equal(s.args[0], b) and s.args[0]._version == 0

    class Scale_(CustomOp, name=f"{ns}::scale_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def default(x: Tensor, factor: float = 2.0) -> Tensor:
            return x.mul_(factor)

        @staticmethod
        def samples():
            return [(torch.randn(3),), (torch.randn(2, 3), 0.5)]

    check_op(Scale_)


def test_check_op_list_input(ns: str) -> None:
    class WeightedSum(CustomOp, name=f"{ns}::weighted_sum"):
        @staticmethod
        def default(xs: list[Tensor], weights: list[float]) -> Tensor:
            return sum((w * x for w, x in zip(weights, xs)), torch.zeros_like(xs[0]))

        @staticmethod
        def abstract(xs: list[Tensor], weights: list[float]) -> Tensor:
            return torch.empty_like(xs[0])

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.weights = list(inputs[1])

        @staticmethod
        def backward(ctx, grad):
            return [grad * w for w in ctx.weights], None

        @staticmethod
        def samples():
            yield Sample(([torch.randn(3, requires_grad=True) for _ in range(3)], [1.0, -2.0, 0.5]), name="three")
            yield Sample(([torch.randn(2, 2)], [3.0]), name="one")

    check_op(WeightedSum)


def test_check_op_keyword_only(ns: str) -> None:
    class AddKw(CustomOp, name=f"{ns}::add_kw"):
        @staticmethod
        def default(x: Tensor, *, other: Tensor, alpha: float = 1.0) -> Tensor:
            return x + alpha * other

        @staticmethod
        def abstract(x: Tensor, *, other: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.empty_like(x + other)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.alpha = keyword_only_inputs["alpha"]

        @staticmethod
        def backward(ctx, grad):
            return grad, grad * ctx.alpha, None

        @staticmethod
        def samples():
            yield Sample((torch.randn(3, requires_grad=True),), {"other": torch.randn(3, requires_grad=True), "alpha": 2.0}, name="both")
            yield Sample((torch.randn(2, 3),), {"other": torch.randn(2, 3)}, name="default_alpha")

    check_op(AddKw)


def test_check_op_without_fake_kernel_skips_fake_tests(ns: str) -> None:
    class NoFake(CustomOp, name=f"{ns}::no_fake"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

    check_op(NoFake, [(torch.randn(3),)])  # test_faketensor / test_aot_dispatch_dynamic left out
    # Asked for explicitly, they run, and fail naming the missing abstract.
    with pytest.raises(AssertionError, match=r"opcheck failed: .*define NoFake\.abstract"):
        check_op(NoFake, [(torch.randn(3),)], test_utils=("test_faketensor",))


def test_check_op_needs_samples(ns: str) -> None:
    class Plain(CustomOp, name=f"{ns}::plain"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    with pytest.raises(ValueError, match=rf"{ns}::plain has no samples: define a samples\(\) static method on Plain"):
        check_op(Plain)
    with pytest.raises(ValueError, match="no samples to check"):
        check_op(Plain, [])
    with pytest.raises(TypeError, match=r"sample 1 is a Tensor, not a Sample or a tuple of arguments"):
        check_op(Plain, [(torch.ones(1),), torch.ones(1)])

    class Base(CustomOp, namespace=ns):
        pass

    with pytest.raises(TypeError, match="not a concrete op class"):
        check_op(Base, [(torch.ones(1),)])


# --------------------------------------------------------------------------- check_op on broken ops


def test_wrong_backward_fails_gradcheck(ns: str) -> None:
    class BadGrad(CustomOp, name=f"{ns}::bad_grad"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.sin()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.sin()  # should be cos

        @staticmethod
        def samples():
            yield Sample((torch.randn(3),), name="vector")

    with pytest.raises(AssertionError) as info:
        check_op(BadGrad, test_utils=("test_schema",))
    message = str(info.value)
    assert message.startswith(f"{ns}::bad_grad, sample 0 ('vector'): gradcheck failed: GradcheckError: Jacobian mismatch"), message
    # The other checks alone pass: the fast path and the dispatcher agree (both wrong).
    check_op(BadGrad, gradcheck=False, test_utils=("test_schema",))


def test_wrong_fake_shape_fails_opcheck(ns: str) -> None:
    class BadFake(CustomOp, name=f"{ns}::bad_fake"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.sum(0)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)  # wrong: the op reduces dim 0

    with pytest.raises(AssertionError) as info:
        check_op(BadFake, [Sample((torch.randn(2, 3),)), Sample((torch.randn(4, 5),), name="big")], test_utils=("test_faketensor",))
    message = str(info.value)
    assert re.match(rf"{ns}::bad_fake, sample 0: opcheck failed: \w+Error: ", message), message
    assert "test_faketensor" in message
    # check_sample labels the sample by name.
    with pytest.raises(AssertionError, match=rf"^{ns}::bad_fake, sample 'big': opcheck failed"):
        check_sample(BadFake, Sample((torch.randn(4, 5),), name="big"), test_utils=("test_faketensor",))


def test_reference_that_disagrees_fails_the_reference_check(ns: str) -> None:
    class NpExp(CustomOp, name=f"{ns}::np_exp"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.exp(x.numpy()))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def reference(x: Tensor) -> Tensor:
            return torch.exp(x) + (x > 1).to(x.dtype)  # wrong above 1

    check_op(NpExp, [(torch.linspace(-2, 0.5, 6),)])  # agrees where the bug does not show
    with pytest.raises(AssertionError) as info:
        check_op(NpExp, [(torch.linspace(-2, 2, 6),)])
    message = str(info.value)
    assert message.startswith(f"{ns}::np_exp, sample 0: reference check failed: {ns}::np_exp (NpExp.reference) disagrees with {ns}::np_exp (NpExp.cpu): AssertionError: Tensor-likes are not close!"), message
    check_op(NpExp, [(torch.linspace(-2, 2, 6),)], reference=False)


def _numpy_sum_rows(ns: str, out_dims: int) -> Any:
    class SumRows(CustomOp, name=f"{ns}::sum_rows_{out_dims}"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(x.numpy().sum(1, keepdims=True))  # (n, m) -> (n, 1)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x.new_empty(x.shape[0], 1)

        @staticmethod
        def vmap(info: Any, in_dims: Any, x: Tensor) -> Any:
            # One call per example, stacked in dim 1: the batch dimension is 1.
            b = x.movedim(in_dims[0], 0)
            out = torch.stack([SumRows(row.contiguous()) for row in b], 1)  # (n, B, 1)
            return out, out_dims

    return SumRows


def test_a_vmap_rule_with_wrong_out_dims_fails_the_vmap_check(ns: str) -> None:
    good, bad = _numpy_sum_rows(ns, 1), _numpy_sum_rows(ns, 0)
    sample = [(torch.arange(6.0).reshape(2, 3),)]
    check_op(good, sample)
    with pytest.raises(AssertionError) as info:
        check_op(bad, sample)
    message = str(info.value)
    assert message.startswith(
        f"{ns}::sum_rows_0, sample 0: vmap check failed: {ns}::sum_rows_0 (SumRows.vmap) disagrees with the op called on each of 3 examples "
        "(the output, batch dim 0): "
    ), message
    assert message.endswith("(is each out_dims where its output's batch dimension is?)"), message


def test_fast_path_mismatch_is_caught(ns: str) -> None:
    class Double(CustomOp, name=f"{ns}::double"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 2 * x

        @staticmethod
        def samples():
            yield Sample((torch.randn(3),), name="vector")

    check_op(Double, opcheck=False)
    original = Double.__dict__["_opclass_call"]
    Double._opclass_fast = None  # the native class call's C entry would not read _opclass_call
    cases = [
        (lambda x: 3 * x, r"at \.output\.values: values differ"),
        (lambda x: (2 * x).double(), r"at \.output\.dtype: torch.float64 vs torch.float32"),
        (lambda x: [2 * x], r"at \.output: keys \['container', 'items'\] vs"),
        (lambda x: x.mul_(2), r"at \.output\.is_input: \[0\] vs \[\]"),
        (lambda x: (_ for _ in ()).throw(ValueError("boom")), r"at \.exception: \('ValueError', 'boom'\) vs None"),
    ]
    try:
        for fake_call, expected in cases:
            Double._opclass_call = fake_call
            with pytest.raises(AssertionError) as info:
                check_op(Double, opcheck=False)
            message = str(info.value)
            assert message.startswith(
                f"{ns}::double, sample 0 ('vector'): fast path vs dispatcher failed: Double(...) and Double.op(...) (the dispatcher) differ at "
            ), message
            assert re.search(expected, message), (expected, message)
    finally:
        Double._opclass_call = original
    check_op(Double, opcheck=False)


def test_fast_path_check_compares_mutations_versions_and_grads(ns: str) -> None:
    class Copy(CustomOp, name=f"{ns}::copy"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.clone()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    sample = Sample((torch.randn(3, requires_grad=True),))
    check_sample(Copy, sample, opcheck=False)
    original = Copy.__dict__["_opclass_call"]
    Copy._opclass_fast = None  # the native class call's C entry would not read _opclass_call

    def mutates(x: Tensor) -> Tensor:
        out = Copy.op(x)
        with torch.no_grad():
            x.add_(1)
        return out

    def bumps(x: Tensor) -> Tensor:
        with torch.no_grad():
            x.add_(0)  # same values, one more version
        return Copy.op(x)

    def other_grad(x: Tensor) -> Tensor:
        return Copy.op(x) + (x - x.detach())  # same values, twice the gradient

    cases = [
        (mutates, r"at \.inputs_after\[0\]\.version: 2 vs 1"),  # the version comes before the values
        (bumps, r"at \.inputs_after\[0\]\.version: 2 vs 1"),
        (other_grad, r"at \.output\.grad_fn"),  # a different graph, and so different gradients
    ]
    try:
        for fake_call, expected in cases:
            Copy._opclass_call = fake_call
            with pytest.raises(AssertionError, match=expected):
                check_sample(Copy, sample, opcheck=False, gradcheck=False)
    finally:
        Copy._opclass_call = original


def test_same_errors_pass_the_fast_path_check(ns: str) -> None:
    class Strict(CustomOp, name=f"{ns}::strict"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            if x.dim() != 1:
                raise ValueError(f"strict: want a vector, got {x.dim()} dims")
            return x.clone()

    # Both paths raise the same error: that is agreement, not a failure.
    check_sample(Strict, (torch.ones(2, 2),), opcheck=False)
    check_sample(Strict, Sample((torch.ones(2),)), opcheck=False)


# --------------------------------------------------------------------------- undeclared mutations


def test_undeclared_mutation_is_caught(ns: str) -> None:
    """A kernel writing to an input that ``mutates_args`` does not name fails the first check,
    naming the op, the class and hook, the argument and the fix."""

    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, gain: float) -> Tensor:
            x.mul_(gain)  # wrong: x is not declared mutated
            return x.clone()

    with pytest.raises(AssertionError) as info:
        check_op(Scale, [(torch.ones(3), 2.0)])
    assert str(info.value) == (
        f"{ns}::scale, sample 0: mutation check failed: {ns}::scale (Scale.cpu) wrote to 'x' (its version counter moved), "
        "but the op does not declare that it mutates 'x', so torch.compile, autograd and functionalization "
        "assume it is unchanged: add mutates_args=('x',) to the class statement (class Scale(CustomOp, ..., "
        "mutates_args=('x',))), or write to a copy instead (x = x.clone() first)"
    )
    # Whatever the other checks are set to.
    with pytest.raises(AssertionError, match="mutation check failed"):
        check_sample(Scale, (torch.ones(3), 2.0), opcheck=False, gradcheck=False, fast_path=False)


def test_undeclared_mutation_names_the_argument_and_keeps_declared_ones(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def default(out: Tensor, xs: list[Tensor]) -> None:
            out.add_(xs[0])
            xs[1].zero_()  # wrong: xs is not declared

    with pytest.raises(AssertionError) as info:
        check_op(AddInto, [(torch.zeros(2), [torch.ones(2), torch.ones(2)])], opcheck=False)
    message = str(info.value)
    assert f"{ns}::add_into (AddInto.default) wrote to 'xs'" in message, message
    assert "add mutates_args=('out', 'xs') to the class statement" in message, message


def test_declared_mutation_passes_the_mutation_check(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor, gain: float) -> None:
            x.mul_(gain)

    check_op(Scale, [(torch.ones(3), 2.0)], opcheck=False)


def test_the_same_tensor_as_a_declared_argument_passes_the_mutation_check(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def default(out: Tensor, x: Tensor) -> None:
            out.add_(x)

    x = torch.ones(3)
    check_op(AddInto, [(x, x), (x, x[:3])], opcheck=False)


def test_check_op_catches_a_write_through_numpy(ns: str) -> None:
    op = numpy_doubler(ns)
    e = error_of(opclass.testing.check_op, op, [(torch.ones(3),)], opcheck=False, gradcheck=False)
    assert f"{ns}::double (Double.cpu) wrote to 'x' (its values changed" in str(e)
    assert "mutates_args=('x',)" in str(e)


# --------------------------------------------------------------------------- check_op and providers


def test_every_failure_while_checking_a_provider_names_it(ns: str) -> None:
    """A provider whose outputs are not what the fake kernel promises, one that writes, one that
    fails on a batch's rows: the failure names the provider, with the original error as cause."""

    class Op(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def default(x: Tensor, y: Tensor) -> Tensor:
            return x + y

        @staticmethod
        def abstract(x: Tensor, y: Tensor) -> Tensor:
            return torch.empty_like(x)

    opclass.add_provider(Op, "fast", lambda x, y: (x + y).double(), "cpu")
    sample = [(torch.randn(4, 3), torch.randn(4, 3))]
    e = error_of(check_op, Op, sample)
    assert str(e).startswith(f"{ns}::op, sample 0: opcheck failed: provider 'fast' of {ns}::op (Op.fast), chosen for the sample: OpCheckError: "), str(e)
    assert type(e.__cause__).__name__ == "OpCheckError"
    assert f"disagrees with {ns}::op (Op.fast): dtype torch.float32 from the fake kernel, torch.float64" in str(error_of(check_op, Op, sample, opcheck=False))

    def writes(x: Tensor, y: Tensor) -> Tensor:
        y.add_(0.0)
        return x + y

    opclass.remove_provider(Op, "fast")
    opclass.add_provider(Op, "writes", writes, "cpu", supports=lambda x, y: True)
    e = error_of(check_op, Op, sample)
    assert f"sample 0: mutation check failed: {ns}::op (Op.writes) wrote to 'y'" in str(e), str(e)  # not Op.providers

    def rows(x: Tensor, y: Tensor) -> Tensor:
        if x.shape[0] == 1:
            raise RuntimeError("rows: a batch of one row")
        return x + y

    opclass.remove_provider(Op, "writes")
    opclass.add_provider(Op, "rows", rows, "cpu", batch_invariant=True)
    e = error_of(check_op, Op, sample, opcheck=False)
    assert isinstance(e, AssertionError) and f"providers failed: provider 'rows' of {ns}::op (Op.rows): RuntimeError: rows: a batch of one row" in str(e), repr(e)
    assert isinstance(e.__cause__, RuntimeError)


def test_a_provider_is_held_to_its_own_tolerances_against_the_reference(ns: str) -> None:
    class Op(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def reference(x: Tensor) -> Tensor:
            return x + x

    opclass.add_provider(Op, "rough", lambda x: x * 2 + 1e-3, "cpu", atol=1e-2, rtol=0.0)
    assert check_op(Op, [(torch.randn(3),)], opcheck=False) == {}
    opclass.remove_provider(Op, "rough")
    opclass.add_provider(Op, "rough", lambda x: x * 2 + 1e-3, "cpu")  # no tolerances of its own: the defaults
    with pytest.raises(AssertionError, match=rf"providers failed: {ns}::op \(Op.rough\) disagrees with {ns}::op \(Op.reference\)"):
        check_op(Op, [(torch.randn(3),)], opcheck=False)


def test_check_op_takes_samples_as_the_dispatcher_does(ns: str) -> None:
    """A tuple for a list, an int for a float, an argument by keyword: kernels, predicates and the
    reference get what the dispatcher would hand them; a sample that cannot bind is named."""

    class Sum(CustomOp, name=f"{ns}::sum"):
        @staticmethod
        def default(xs: list[Tensor], k: float) -> Tensor:
            return (xs[0] + xs[1]) * k

        @opclass.provider("cpu", supports=lambda xs, k: isinstance(xs, list) and isinstance(k, float))
        @staticmethod
        def fast(xs: list[Tensor], k: float) -> Tensor:
            return torch.stack(xs + []).sum(0) * k

    assert check_op(Sum, [((torch.arange(3), torch.arange(3)), 2), Sample((), {"k": 1, "xs": (torch.ones(2), torch.ones(2))})]) == {}
    pair = (torch.ones(2), torch.ones(2))
    for bad, said in ((Sample((pair,)), "missing a required argument: 'k'"), (Sample((pair, 1.0), {"z": 1}), "got an unexpected keyword argument 'z'")):
        e = error_of(check_op, Sum, [bad], opcheck=False)
        assert isinstance(e, TypeError) and str(e) == f"{ns}::sum, sample 0: {said}; the op takes (xs, k)", repr(e)


@needs_tag("inplace")
def test_check_op_takes_an_inplace_ops_argument_by_keyword(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def default(x: Tensor, y: Tensor) -> Tensor:
            return x.add_(y)

        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor, y: Tensor) -> Tensor:
            return x.add_(y)

    assert check_op(AddInto, [Sample((), {"x": torch.zeros(3), "y": torch.ones(3)})]) == {}


def test_copies_of_a_sample_keep_its_strides(ns: str) -> None:
    """An expanded (stride 0) or transposed sample reaches predicates and kernels as it is."""
    seen: list[tuple[int, ...]] = []

    class Op(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider("cpu", supports=lambda x: seen.append(x.stride()) or True)
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            return x * 2

    for x in (torch.randn(3, 1).expand(3, 4), torch.randn(4, 3).t(), torch.randn(6)[::2]):
        seen.clear()
        copy = copy_inputs(Sample((x,)))[0][0]
        assert copy.stride() == x.stride() and torch.equal(copy, x) and copy.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        check_op(Op, [(x,)], opcheck=False)
        assert set(seen) == {x.stride()}, (x.stride(), seen)


def test_gradcheck_takes_tolerances_for_an_op_that_computes_in_float32(ns: str) -> None:
    class F32Square(CustomOp, name=f"{ns}::f32_square"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return (x.float() ** 2).to(x.dtype)  # float32 by spec, whatever the input's dtype

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x

    sample = [(torch.rand(8) + 0.5,)]
    with pytest.raises(AssertionError, match="gradcheck failed: GradcheckError: Jacobian mismatch"):
        check_op(F32Square, sample, opcheck=False)  # float64 defaults: a step of 1e-6 in float32
    check_op(F32Square, sample, opcheck=False, gradcheck={"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2})


def test_the_reference_check_reads_the_tolerances_of_the_op_own_kernel(ns: str) -> None:
    def make(**tolerances: Any) -> Any:
        class Rounded(CustomOp, name=f"{ns}::rounded"):
            @opclass.provider(**tolerances)
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return (x * 1024).round() / 1024  # a kernel that keeps 10 bits

            @staticmethod
            def reference(x: Tensor) -> Tensor:
                return x.clone()

        return Rounded

    sample = [(torch.rand(16),)]
    with pytest.raises(AssertionError, match="reference check failed"):
        check_op(make(), sample, opcheck=False)
    check_op(make(atol={torch.float32: 1e-3}, rtol={torch.float32: 0.0}), sample, opcheck=False)
