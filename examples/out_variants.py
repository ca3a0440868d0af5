"""One op, three calling conventions: functional, ``out=`` and in place, from one out-style kernel.

``RmsNorm`` (``ex_out_variants::rms_norm``) has a single kernel, written as vLLM's C++ kernels
are: it takes the op's arguments and writes the result into a keyword-only ``out`` buffer
(``@opclass.style("out")``). The class keywords ``out=True, inplace=("x",)`` give the op an
``.out`` overload and an in-place op (named as torch names its own, ``add_``) beside the
functional one:

* ``ex_out_variants::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor``: what eager code
  calls, differentiable (``setup_context``/``backward``); its buffer is allocated with
  ``abstract``, then the kernel writes into it;
* ``ex_out_variants::rms_norm.out(..., *, Tensor(a!) out) -> Tensor(a!)``: the caller's buffer,
  handed to the kernel as it is (no copy); what Inductor lowers the functional op to;
* ``ex_out_variants::rms_norm_(Tensor(a!) x, ...) -> Tensor(a!)``: ``x`` overwritten with
  the result (the kernel writes into a fresh buffer, which is copied into ``x``).

``eps`` has no default on purpose: torch's Inductor (2.13 to 2.15) passes a defaulted non-Tensor
argument twice when it lowers a functional op to its ``.out`` overload.

Run it with ``python examples/out_variants.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

import opclass
from opclass import CustomOp


def rms_norm_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The same math in plain torch ops, to hold the kernel to."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RmsNorm(CustomOp, namespace="ex_out_variants", out=True, inplace=("x",)):
    """Root-mean-square normalization over the last dimension, scaled by ``weight``."""

    @staticmethod
    @opclass.style("out")
    def cpu(x: Tensor, weight: Tensor, eps: float, *, out: Tensor) -> None:
        # Every write goes through torch's out= (resized as torch resizes an out= argument), as a
        # C++ kernel writes into the buffer it is given; nothing is returned.
        torch.mul(x, torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), out=out)
        torch.mul(out, weight, out=out)

    @staticmethod
    def abstract(x: Tensor, weight: Tensor, eps: float) -> Tensor:
        # Also how the functional call allocates the buffer the out-style kernel writes into.
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, weight = ctx.saved_tensors
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
        xr, gw = x * r, grad * weight
        # d/dx of x*r*w, r = rsqrt(mean(x**2) + eps), is r * (gw - x*r * mean(gw * x*r)).
        dx = r * (gw - xr * (gw * xr).mean(-1, keepdim=True)) if ctx.needs_input_grad[0] else None
        dw = (grad * xr).sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        return dx, dw, None


def main() -> None:
    g = torch.Generator().manual_seed(0)
    x, weight, eps = torch.randn(4, 16, generator=g), torch.randn(16, generator=g), 1e-6
    expected = rms_norm_reference(x, weight, eps)

    # Functional: a new Tensor (allocated with abstract, then written by the out-style kernel).
    torch.testing.assert_close(RmsNorm(x, weight, eps), expected)

    # out=: the class call routes to the .out overload; the buffer itself comes back, written.
    buf = torch.empty_like(x)
    assert RmsNorm(x, weight, eps, out=buf) is buf
    torch.testing.assert_close(buf, expected)
    empty = torch.empty(0)  # an empty out is resized, as torch's own out= functions do
    assert RmsNorm.out(x, weight, eps, out=empty) is empty and empty.shape == x.shape
    torch.testing.assert_close(empty, expected)

    # In place: x itself is overwritten and returned.
    donated = x.clone()
    assert RmsNorm.inplace(donated, weight, eps) is donated
    torch.testing.assert_close(donated, expected)

    # The same overloads through torch.ops, as Inductor-generated code and exported programs call them.
    ops = torch.ops.ex_out_variants.rms_norm
    other = torch.empty_like(x)
    assert ops.out(x, weight, eps, out=other) is other
    torch.testing.assert_close(other, expected)
    assert sorted(ops.overloads()) == ["default", "out"]
    assert torch.ops.ex_out_variants.rms_norm_.default is RmsNorm.inplace.op

    # Only the functional overload is differentiable.
    xg, wg = x.clone().requires_grad_(), weight.clone().requires_grad_()
    RmsNorm(xg, wg, eps).square().sum().backward()
    xr, wr = x.clone().requires_grad_(), weight.clone().requires_grad_()
    rms_norm_reference(xr, wr, eps).square().sum().backward()
    torch.testing.assert_close((xg.grad, wg.grad), (xr.grad, wr.grad))
    try:
        RmsNorm(xg, wg, eps, out=torch.empty_like(x))
    except RuntimeError as e:
        assert "don't support automatic differentiation" in str(e), e
    else:
        raise AssertionError("out= with an input that requires grad must be refused, as torch refuses it")

    for overload in (RmsNorm, RmsNorm.out, RmsNorm.inplace):
        print(f"{overload.qualname}{overload.schema}")


if __name__ == "__main__":
    main()
