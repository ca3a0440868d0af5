"""The output contract of ops that promise fresh outputs: a cheap pre-check, then the full one."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
from torch import _C

from . import _native

_refs = sys.getrefcount


_storage_uses = torch._C._storage_Use_Count


def _python_fresh(out: Any) -> bool:
    # References: the caller's variable, this parameter, getrefcount's argument. Storage uses:
    # the Tensor and the temporary storage object made here; a view, its base or a detached
    # alias would be a third (so no `_base` test is needed).
    return type(out) is torch.Tensor and _refs(out) <= 3 and _storage_uses(out.untyped_storage()._cdata) <= 2


def output_is_fresh() -> Callable[[Any], bool]:
    """``fresh(out)``: True when ``out`` is a plain Tensor only the caller holds and no view, so
    it cannot alias an input. False means "run the full check", never "it aliases"."""
    native = _native.native_module()
    return native.fresh if native is not None else _python_fresh


def check_aliasing(where: str, args: Any, kwargs: Any, result: Any) -> None:
    """Raise if an output of an op that promises fresh outputs aliases an input or another output."""
    if _C._any_output_is_alias_to_input_or_output(args, kwargs, result if type(result) is tuple else (result,)):
        raise RuntimeError(
            f"{where}: the output of this custom operator (1) must not also be an input to this "
            "custom operator and (2) may not alias any inputs to this custom operator or other "
            "returns. Return a clone of the offending output (e.g. x.clone()) instead."
        )


def check_arity(where: str, n_returns: int, result: Any) -> None:
    """Raise if a multi-output kernel returned a sequence of the wrong length (torch 2.13's
    dispatcher crashes the process on that instead of raising)."""
    if n_returns > 1 and type(result) in (tuple, list) and len(result) != n_returns:
        raise RuntimeError(f"{where}: the kernel returned {len(result)} values, but the op's schema declares {n_returns} outputs")


def check_outputs(where: str, n_returns: int, args: Any, kwargs: Any, result: Any) -> None:
    """The full output checks for ops that promise fresh outputs: arity, then aliasing."""
    check_arity(where, n_returns, result)
    check_aliasing(where, args, kwargs, result)
