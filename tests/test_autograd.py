"""Autograd formulas (``setup_context`` / ``backward``): what setup_context sees, how many gradients
backward may return and the errors for wrong ones, gradients of keyword-only, list and non-Tensor
arguments, and training through an op without a formula."""

from __future__ import annotations

from typing import Any, Optional

import pytest
import torch
from torch import Tensor

from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths

from _errors import error_of, first_line
from _paths import assert_paths_agree_on


# --------------------------------------------------------------------------- no formula


def test_no_backward_forward_works_backward_raises(ns: str) -> None:
    class NoGrad(CustomOp, name=f"{ns}::no_grad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

    x = torch.ones(3, requires_grad=True)
    y = NoGrad(x)
    torch.testing.assert_close(y, torch.full((3,), 2.0))
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()
    # Without inputs that need grad there is nothing to complain about.
    out = NoGrad(torch.ones(3))
    assert not out.requires_grad


def test_training_through_a_default_without_a_formula_offers_eager_autograd(ns: str) -> None:
    class RMS(CustomOp, name=f"{ns}::rms"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    for label, fn in call_paths(RMS).items():
        line = first_line(error_of(fn(torch.ones(2, 3, requires_grad=True)).sum().backward))
        assert line.startswith(f"Trying to backward through {ns}::rms (RMS), but no autograd formula was registered: add eager_autograd = True to class RMS"), (label, line)


# --------------------------------------------------------------------------- what setup_context sees


def _kw_only_op(ns: str, seen: dict[str, Any]) -> Any:
    class ScaledMul(CustomOp, name=f"{ns}::scaled_mul"):
        @staticmethod
        def cpu(x: Tensor, *, w: Tensor, scale: float = 2.0) -> Tensor:
            return x * w * scale

        @staticmethod
        def abstract(x: Tensor, *, w: Tensor, scale: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output) -> None:
            seen["inputs"] = inputs
            seen["kw"] = dict(keyword_only_inputs)
            ctx.save_for_backward(inputs[0], keyword_only_inputs["w"])
            ctx.scale = keyword_only_inputs["scale"]

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            seen["needs"] = tuple(ctx.needs_input_grad)
            return grad * w * ctx.scale, grad * x * ctx.scale, None

    return ScaledMul


def test_grad_for_keyword_only_tensor_arg(ns: str) -> None:
    seen: dict[str, Any] = {}
    ScaledMul = _kw_only_op(ns, seen)
    x = torch.randn(3, dtype=torch.double, requires_grad=True)
    w = torch.randn(3, dtype=torch.double, requires_grad=True)
    gx, gw = torch.autograd.grad(ScaledMul(x, w=w, scale=3.0).sum(), (x, w))
    torch.testing.assert_close(gx, 3.0 * w.detach())
    torch.testing.assert_close(gw, 3.0 * x.detach())
    assert torch.autograd.gradcheck(lambda a, b: ScaledMul(a, w=b, scale=0.5), (x, w))
    # Only w needs grad: needs_input_grad is in (x, w, scale) order.
    (gw_only,) = torch.autograd.grad(ScaledMul(x.detach(), w=w).sum(), (w,))
    torch.testing.assert_close(gw_only, 2.0 * x.detach())
    assert seen["needs"] == (False, True, False)


def test_setup_context_sees_defaults_the_caller_omitted(ns: str) -> None:
    seen: dict[str, Any] = {}
    ScaledMul = _kw_only_op(ns, seen)
    x = torch.randn(3, requires_grad=True)
    y = ScaledMul(x, w=torch.ones(3))
    assert seen["kw"]["scale"] == 2.0
    assert set(seen["kw"]) == {"w", "scale"}
    assert len(seen["inputs"]) == 1 and seen["inputs"][0] is x
    (gx,) = torch.autograd.grad(y.sum(), (x,))
    torch.testing.assert_close(gx, torch.full((3,), 2.0))


def test_setup_context_sees_positional_defaults(ns: str) -> None:
    seen: dict[str, Any] = {}

    class Affine(CustomOp, name=f"{ns}::affine"):
        @staticmethod
        def cpu(x: Tensor, a: float = 2.0, b: float = 1.0, bias: Tensor | None = None) -> Tensor:
            y = x * a + b
            return y if bias is None else y + bias

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:
            seen["inputs"] = inputs
            ctx.a = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.a, None, None, None

    x = torch.randn(3, requires_grad=True)
    Affine(x).sum().backward()
    assert len(seen["inputs"]) == 4
    assert seen["inputs"][0] is x
    assert seen["inputs"][1:] == (2.0, 1.0, None)
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    # Explicitly passing a value equal to the default: still seen.
    Affine(x, 2.0, b=5.0)
    assert seen["inputs"][1:] == (2.0, 5.0, None)


# --------------------------------------------------------------------------- how many gradients backward returns


def test_backward_with_wrong_gradient_count_raises(ns: str) -> None:
    class TwoIn(CustomOp, name=f"{ns}::two_in"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x * y

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:
            pass

        @staticmethod
        def backward(ctx, grad):
            return (grad,)

    with pytest.raises(RuntimeError, match="returned 1 gradients"):
        TwoIn(torch.ones(2, requires_grad=True), torch.ones(2)).sum().backward()


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
    seen = assert_paths_agree_on(op, torch.ones(2, requires_grad=True))
    assert seen["grads"][0]["values"].tolist() == [2.0, 2.0]
    # k equal to its default counts as not passed, as the dispatcher counts it.
    seen = assert_paths_agree_on(op, torch.ones(2, requires_grad=True), 2.0)
    assert seen["grads"][0]["values"].tolist() == [2.0, 2.0]
    if grads == "all":
        seen = assert_paths_agree_on(op, torch.ones(2, requires_grad=True), 3.0)
        assert seen["grads"][0]["values"].tolist() == [3.0, 3.0]


def test_backward_returns_one_gradient_per_argument_passed_or_per_input(ns: str) -> None:
    """custom_op accepts those two counts; any other is most often a slip in backward."""
    op = _scale(ns, "passed")  # one gradient, where x and k are passed
    seen = assert_paths_agree_on(op, torch.ones(2, requires_grad=True), 3.0)
    assert seen["backward"] == (
        "RuntimeError",
        f"{ns}::scale_passed (Scale.backward) returned 1 gradients; expected one per argument passed (2) or one per "
        "positional input (3): return None for an input with no gradient",
    )


def test_a_missing_gradient_for_an_input_that_needs_one_is_an_error(ns: str) -> None:
    op = _scale(ns, "passed")
    seen = assert_paths_agree_on(op, torch.ones(2, requires_grad=True), 3.0, torch.ones(2, requires_grad=True))
    assert seen["backward"][0] == "RuntimeError"
    assert "(Scale.backward) returned 1 gradients; expected one per positional input (3)" in seen["backward"][1]


def test_a_missing_gradient_for_a_keyword_only_input_that_requires_grad_is_an_error(ns: str) -> None:
    """Gradients for keyword-only inputs may be left off, but not for one that requires grad: an
    explicit None says "no gradient", a missing one is most often a formula written without it."""

    class Scaled(CustomOp, name=f"{ns}::scaled"):
        @staticmethod
        def default(x: Tensor, *, scale: Tensor) -> Tensor:
            return x * scale

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, keyword_only_inputs: Any, output: Any) -> None:
            ctx.save_for_backward(keyword_only_inputs["scale"])

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.saved_tensors[0]  # none for scale

    for label, fn in call_paths(Scaled).items():
        line = first_line(error_of(fn(torch.ones(2, requires_grad=True), scale=torch.ones(2, requires_grad=True)).sum().backward))
        assert line == (
            f"{ns}::scaled (Scaled.backward) returned no gradient for the keyword-only 'scale', which requires grad: "
            "return one gradient per input, keyword-only ones last (2 in all), None for an input with no gradient"
        ), label
        x = torch.ones(2, requires_grad=True)
        fn(x, scale=torch.full((2,), 3.0)).sum().backward()  # scale needs no gradient: none is missing
        assert x.grad.tolist() == [3.0, 3.0], label


@pytest.mark.parametrize("where", ["positional", "keyword_only"])
def test_a_backward_inherited_by_a_variant_with_a_new_tensor_argument_is_refused(ns: str, where: str) -> None:
    """A variant adding a learnable Tensor (scale) to a base's arguments would run the base's
    formula, which returns no gradient for it: refused when the class is created."""

    class Norm(CustomOp, name=f"{ns}::norm_{where}"):
        @staticmethod
        def default(x: Tensor, *, eps: float = 1e-6) -> Tensor:
            return x * 2

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, keyword_only_inputs: Any, output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * 2

    with pytest.raises(OpDefinitionError) as e:
        if where == "positional":

            class ScaledNorm(Norm, name=f"{ns}::scaled_norm_{where}"):
                @staticmethod
                def default(x: Tensor, scale: Tensor, *, eps: float = 1e-6) -> Tensor:
                    return x * 2 * scale

        else:

            class ScaledNorm(Norm, name=f"{ns}::scaled_norm_{where}"):  # type: ignore[no-redef]
                @staticmethod
                def default(x: Tensor, *, eps: float = 1e-6, scale: Tensor) -> Tensor:
                    return x * 2 * scale

    params = "(x, scale, *, eps=1e-06)" if where == "positional" else "(x, *, eps=1e-06, scale)"
    assert str(e.value) == (
        "ScaledNorm.backward(ctx: Any, grad: Tensor) -> Any: is inherited from Norm, whose formula was written for "
        f"Norm's arguments (x, *, eps=1e-06) and gives no gradient for 'scale' of ScaledNorm{params}; "
        f"define setup_context and backward on ScaledNorm, returning one gradient per input of {params} (None for an input with no gradient)"
    )

    class Tuned(Norm, name=f"{ns}::tuned_{where}"):  # same arguments: the formula fits
        @staticmethod
        def cpu(x, *, eps=1e-6):  # type: ignore[no-untyped-def]
            return x * 2

    x = torch.ones(2, requires_grad=True)
    Tuned(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


# --------------------------------------------------------------------------- gradients for arguments that are no Tensor


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

    seen = assert_paths_agree_on(Shift, torch.ones(2, requires_grad=True))
    assert seen["backward"] == ("RuntimeError", "function ShiftFunctionBackward returned a gradient different than None at position 2, but the corresponding forward input was not a Variable")


def test_a_gradient_for_a_float_argument_names_the_argument(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, alpha: float) -> Tensor:
            return x * alpha

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.alpha = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.alpha, grad.sum()  # the second is wrong: alpha is a float

    for label, fn in call_paths(Scale).items():
        out = fn(torch.ones(2, requires_grad=True), 2.0)
        line = first_line(error_of(out.sum().backward))
        assert line == (
            f"{ns}::scale (Scale.backward) returned a gradient for 'alpha' (gradient 2 of 2), which is float, not a Tensor: return None for 'alpha'"
        ), label


# --------------------------------------------------------------------------- Tensor lists


def test_an_empty_int_list_takes_a_none_gradient(ns: str) -> None:
    class Cat(CustomOp, name=f"{ns}::cat"):
        @staticmethod
        def cpu(xs: list[Tensor], dims: list[int]) -> Tensor:
            return torch.cat(xs).sum(dims) if dims else torch.cat(xs) * 1.0

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.sizes = [len(x) for x in inputs[0]]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return list(grad.expand(sum(ctx.sizes)).split(ctx.sizes)), None

    for dims in ([0], []):
        for label, fn in call_paths(Cat).items():
            xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
            fn(xs, dims).sum().backward()
            assert [x.grad.tolist() for x in xs] == [[1.0, 1.0], [1.0, 1.0, 1.0]], (label, dims)


@pytest.mark.parametrize("returns", ["positional_only", "keyword_only_too"])
def test_an_empty_keyword_only_int_list_takes_a_none_gradient(ns: str, returns: str) -> None:
    """As the positional case above: torch reads an empty list of anything as a Tensor list."""

    class Cat(CustomOp, name=f"{ns}::cat_{returns}"):
        @staticmethod
        def cpu(xs: list[Tensor], *, dims: list[int], ws: list[Tensor]) -> Tensor:
            return torch.cat(xs).sum(dims) if dims else torch.cat(xs) * 1.0

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, keyword_only_inputs: Any, output: Any) -> None:
            ctx.sizes = [len(x) for x in inputs[0]]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            grads = list(grad.expand(sum(ctx.sizes)).split(ctx.sizes))
            return grads if returns == "positional_only" else (grads, None, None)

    for dims, ws in (([0], [torch.ones(1)]), ([], [])):
        for label, fn in call_paths(Cat).items():
            xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
            fn(xs, dims=dims, ws=ws).sum().backward()
            assert [x.grad.tolist() for x in xs] == [[1.0, 1.0], [1.0, 1.0, 1.0]], (label, dims)


def test_none_is_the_gradient_of_a_whole_tensor_list(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, ws: list[Tensor]) -> Tensor:
            return x * sum(w.sum() for w in ws) if ws else x.clone()

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.k = sum(w.sum() for w in inputs[1]) if inputs[1] else 1.0

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.k, None  # no gradient for ws

    for ws in ([torch.ones(2), torch.ones(1)], []):
        for label, fn in call_paths(Scale).items():
            x = torch.ones(2, requires_grad=True)
            fn(x, ws).sum().backward()
            assert x.grad.tolist() == ([3.0, 3.0] if ws else [1.0, 1.0]), (label, len(ws))
