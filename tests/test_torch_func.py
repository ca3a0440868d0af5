"""torch.func transforms and forward-mode AD on opclass ops.

An op with ``setup_context``/``backward`` (and ``jvp`` for forward mode) works under
``torch.func.grad``, ``vjp``, ``jacrev``, ``jacfwd``, ``jvp``, ``vmap`` and their compositions, and
under ``torch.autograd.forward_ad``, matching the same computation written with torch ops. An op
with no ``jvp`` raises a clear error under forward mode instead of a silent zero tangent.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor

from opclass import CustomOp, OpDefinitionError


def make(ns: str, with_jvp: bool = True) -> Any:
    class Sin(CustomOp, name=f"{ns}::sin"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(x.detach().numpy().copy()).sin()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            (x,) = inputs
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return grad * x.cos()

        if with_jvp:

            @staticmethod
            def jvp(ctx, x_t):  # type: ignore[no-untyped-def]
                (x,) = ctx.saved_tensors
                return x_t * x.cos()

    return Sin


def make_mul(ns: str) -> Any:
    """Two inputs, a Python float, and a numpy kernel (opaque to autograd)."""

    class Mul(CustomOp, name=f"{ns}::mul"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.from_numpy(x.detach().numpy() * y.detach().numpy() * alpha)

        @staticmethod
        def abstract(x: Tensor, y: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            x, y, alpha = inputs
            ctx.save_for_backward(x, y)
            ctx.save_for_forward(x, y)
            ctx.alpha = alpha

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, y = ctx.saved_tensors
            return grad * y * ctx.alpha, grad * x * ctx.alpha, None

        @staticmethod
        def jvp(ctx, x_t, y_t, alpha_t):  # type: ignore[no-untyped-def]
            x, y = ctx.saved_tensors
            return (x_t * y + x * y_t) * ctx.alpha

    return Mul


TRANSFORMS: dict[str, Callable[[Callable[[Tensor], Tensor], Tensor], Any]] = {
    "grad": lambda f, x: torch.func.grad(lambda t: f(t).sum())(x),
    "vjp": lambda f, x: torch.func.vjp(f, x)[1](torch.linspace(0.5, 1.5, x.shape[-1]).expand_as(x)),
    "jacrev": lambda f, x: torch.func.jacrev(f)(x),
    "jacfwd": lambda f, x: torch.func.jacfwd(f)(x),
    "jvp": lambda f, x: torch.func.jvp(f, (x,), (torch.ones_like(x),)),
    "vmap": lambda f, x: torch.func.vmap(f)(x.expand(4, -1) * torch.arange(4.0)[:, None]),
    "vmap_grad": lambda f, x: torch.func.vmap(torch.func.grad(lambda t: f(t).sum()))(x.expand(3, -1) + torch.arange(3.0)[:, None]),
    "grad_grad": lambda f, x: torch.func.grad(lambda t: torch.func.grad(lambda u: f(u).sum())(t).sum())(x),
    "hessian": lambda f, x: torch.func.hessian(lambda t: f(t).sum())(x),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_transform_matches_torch(ns: str, transform: str) -> None:
    Sin = make(ns)
    x = torch.linspace(-2, 2, 5, dtype=torch.float64)
    got = TRANSFORMS[transform](Sin, x)
    expected = TRANSFORMS[transform](torch.sin, x)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("transform", ["grad", "jacrev", "jacfwd", "vmap_grad"])
def test_two_input_op(ns: str, transform: str) -> None:
    Mul = make_mul(ns)
    y = torch.linspace(1, 2, 5, dtype=torch.float64)
    x = torch.linspace(-2, 2, 5, dtype=torch.float64)
    got = TRANSFORMS[transform](lambda t: Mul(t, y, 3.0), x)
    expected = TRANSFORMS[transform](lambda t: t * y * 3.0, x)
    torch.testing.assert_close(got, expected)
    jac_y = torch.func.jacrev(lambda t: Mul(x, t), argnums=0)(y)
    torch.testing.assert_close(jac_y, torch.diag(x))


def test_eager_forward_ad(ns: str) -> None:
    Sin = make(ns)
    x, t = torch.linspace(-1, 1, 4, dtype=torch.float64), torch.full((4,), 2.0, dtype=torch.float64)
    with fwAD.dual_level():
        out = Sin(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(out)
    torch.testing.assert_close(primal, x.sin())
    torch.testing.assert_close(tangent, 2 * x.cos())
    # Through the OpOverload (the dispatcher path) too.
    with fwAD.dual_level():
        tangent_op = fwAD.unpack_dual(Sin.op(fwAD.make_dual(x, t))).tangent
    torch.testing.assert_close(tangent_op, 2 * x.cos())


def test_forward_ad_without_jvp_is_an_error_not_a_zero_tangent(ns: str) -> None:
    Sin = make(ns, with_jvp=False)
    x = torch.linspace(-1, 1, 4)
    message = f"Trying to use forward-mode AD with {ns}::sin but no forward-mode formula was registered: define jvp on Sin"
    with pytest.raises(RuntimeError, match=message), fwAD.dual_level():
        Sin(fwAD.make_dual(x, torch.ones(4)))
    with pytest.raises(RuntimeError, match=message):
        torch.func.jvp(Sin, (x,), (torch.ones(4),))
    # Reverse mode is unaffected.
    torch.testing.assert_close(torch.func.grad(lambda t: Sin(t).sum())(x), x.cos())


def test_gradcheck_and_forward_gradcheck(ns: str) -> None:
    Sin = make(ns)
    x = torch.linspace(-1, 1, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(Sin, (x,), check_forward_ad=True, check_backward_ad=True)


def test_jvp_definition_errors(ns: str) -> None:
    with pytest.raises(OpDefinitionError, match=r"Bad.jvp\(ctx, x_t, y_t\): takes 3 positional parameters, but the op has 1 positional input"):

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x.clone()

            @staticmethod
            def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
                pass

            @staticmethod
            def backward(ctx, grad):  # type: ignore[no-untyped-def]
                return grad

            @staticmethod
            def jvp(ctx, x_t, y_t):  # type: ignore[no-untyped-def]
                return x_t

    with pytest.raises(OpDefinitionError, match="is defined without 'setup_context'"):

        class NoSetup(CustomOp, name=f"{ns}::no_setup"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x.clone()

            @staticmethod
            def jvp(ctx, x_t):  # type: ignore[no-untyped-def]
                return x_t
