"""The ops of ``test_conventions.py`` written by hand with ``torch.library``, as a careful author
writes them without opclass: an RMS norm ``(Tensor x, Tensor w, float eps) -> Tensor`` and vLLM's
``fused_add_rms_norm`` ``(Tensor x, Tensor residual, Tensor w, float eps) -> (Tensor, Tensor)``,
each with an ``.out`` overload (tagged ``torch.Tag.out``) and an in-place op ``rms_`` /
``fused_add_rms_`` (named as torch names its own, ``add_``; tagged ``torch.Tag.inplace`` where it
writes its first argument alone), so that a test can assert that one class statement with
``out=True, inplace=(...)`` gives the same ops.

The math is here too (:func:`rms_norm`, :func:`fused_add_rms_norm`, :func:`rms_norm_backward`):
the op classes and the twins run the same code, so their values agree bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

__all__ = ["SCHEMAS", "define_twins", "fused_add_rms_norm", "inv_rms", "qualname", "rms_norm", "rms_norm_backward"]

#: The tags this torch has (torch 2.11 and 2.12 have neither ``Tag.out`` nor ``Tag.inplace``).
_OUT = getattr(torch.Tag, "out", None)
_INPLACE = getattr(torch.Tag, "inplace", None)

#: op name -> convention -> (schema without the name, the tags the convention gives it); the
#: in-place op is ``<name>_`` (see :func:`qualname`).
SCHEMAS: dict[str, dict[str, tuple[str, tuple[Any, ...]]]] = {
    "rms": {
        "functional": ("(Tensor x, Tensor w, float eps) -> Tensor", ()),
        "out": ("(Tensor x, Tensor w, float eps, *, Tensor(a!) out) -> Tensor(a!)", (_OUT,)),
        "inplace": ("(Tensor(a!) x, Tensor w, float eps) -> Tensor(a!)", (_INPLACE,)),
    },
    "fused_add_rms": {
        "functional": ("(Tensor x, Tensor residual, Tensor w, float eps) -> (Tensor, Tensor)", ()),
        "out": ("(Tensor x, Tensor residual, Tensor w, float eps, *, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))", (_OUT,)),
        # Two arguments written: not torch's Tag.inplace, which is "writes its first argument, returns it".
        "inplace": ("(Tensor(a!) x, Tensor(b!) residual, Tensor w, float eps) -> (Tensor(a!), Tensor(b!))", ()),
    },
}


def inv_rms(x: Tensor, eps: float) -> Tensor:
    """``1 / sqrt(mean(x**2) + eps)`` over the last dimension (kept, to broadcast)."""
    return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    # (x * r) * w, the order the out-style and in-place kernels of the tests compute in: same bits.
    return x * inv_rms(x, eps) * w


def fused_add_rms_norm(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """vLLM's fused_add_rms_norm: ``(rms_norm(x + residual), x + residual)``."""
    total = x + residual
    return rms_norm(total, w, eps), total


def rms_norm_backward(grad: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """The gradients of :func:`rms_norm` for ``x`` and ``w``."""
    r = inv_rms(x, eps)
    gw = grad * w
    gx = r * gw - x * r.pow(3) * (gw * x).mean(-1, keepdim=True)
    return gx, (grad * x * r).reshape(-1, w.shape[-1]).sum(0)


def _copy_out(result: Tensor, out: Tensor) -> Tensor:
    """``result`` into ``out`` with torch's ``out=`` rules: an empty ``out`` resized, a non-empty
    one of another shape resized with a warning, an unsafe cast or another device refused."""
    _maybe_resize_out(out, result.shape)
    _safe_copy_out(copy_from=result, copy_to=out, exact_dtype=False)
    return out


def _rms_out(x: Tensor, w: Tensor, eps: float, *, out: Tensor) -> Tensor:
    return _copy_out(rms_norm(x, w, eps), out)


def _rms_inplace(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return x.copy_(rms_norm(x, w, eps))


def _fused_out(x: Tensor, residual: Tensor, w: Tensor, eps: float, *, out0: Tensor, out1: Tensor) -> tuple[Tensor, Tensor]:
    normed, total = fused_add_rms_norm(x, residual, w, eps)
    return _copy_out(normed, out0), _copy_out(total, out1)


def _fused_inplace(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    normed, total = fused_add_rms_norm(x, residual, w, eps)
    return x.copy_(normed), residual.copy_(total)


def _rms_setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


def _rms_backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
    x, w = ctx.saved_tensors
    return (*rms_norm_backward(grad, x, w, ctx.eps), None)


_KERNELS = {
    ("rms", "functional"): rms_norm,
    ("rms", "out"): _rms_out,
    ("rms", "inplace"): _rms_inplace,
    ("fused_add_rms", "functional"): fused_add_rms_norm,
    ("fused_add_rms", "out"): _fused_out,
    ("fused_add_rms", "inplace"): _fused_inplace,
}

# The fake kernels: the functional ones allocate, the others return the arguments they write.
_FAKES = {
    ("rms", "functional"): lambda x, w, eps: torch.empty_like(x),
    ("rms", "out"): lambda x, w, eps, *, out: out,
    ("rms", "inplace"): lambda x, w, eps: x,
    ("fused_add_rms", "functional"): lambda x, residual, w, eps: (torch.empty_like(x), torch.empty_like(x)),
    ("fused_add_rms", "out"): lambda x, residual, w, eps, *, out0, out1: (out0, out1),
    ("fused_add_rms", "inplace"): lambda x, residual, w, eps: (x, residual),
}


def qualname(ns: str, name: str, kind: str) -> str:
    """``ns::rms``, ``ns::rms.out``, ``ns::rms_``: the op of each convention."""
    return {"functional": f"{ns}::{name}", "out": f"{ns}::{name}.out", "inplace": f"{ns}::{name}_"}[kind]


def define_twins(ns: str) -> torch.library.Library:
    """Define every op of :data:`SCHEMAS` in ``ns`` with ``Library(ns, "DEF")``: schema and tags
    (``pt2_compliant_tag`` as ``custom_op`` gives it), a CPU kernel, a fake kernel, and the RMS
    norm's autograd formula. The caller destroys the library (``lib._destroy()``)."""
    lib = torch.library.Library(ns, "DEF")  # type: ignore[no-untyped-call]
    for name, overloads in SCHEMAS.items():
        for kind, (schema, tags) in overloads.items():
            full = qualname(ns, name, kind).partition("::")[2]
            lib.define(full + schema, tags=(torch.Tag.pt2_compliant_tag, *(t for t in tags if t is not None)))
            lib.impl(full, _KERNELS[name, kind], "CPU")
            torch.library.register_fake(f"{ns}::{full}", _FAKES[name, kind], lib=lib)
    torch.library.register_autograd(f"{ns}::rms", _rms_backward, setup_context=_rms_setup_context, lib=lib)
    return lib
