"""The output contract of ops that promise fresh outputs: a cheap pre-check, then the full one."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
from torch import _C

from . import _native

_refs = sys.getrefcount


_storage_uses = torch._C._storage_Use_Count
# The StorageImpl's address straight from the Tensor (torch 2.11+): no storage object is made,
# which is most of what ``untyped_storage()._cdata`` costs for a new output (~0.13 of 0.18 us).
_storage_address: Callable[[Any], int] | None = getattr(_C, "_storage_address", None)

#: Source text of the cheap test for ``_out`` (a single returned value) that generated calls
#: inline, with :data:`INLINE_NAMES` as closure locals. It can raise for a Tensor without
#: storage (sparse, for one): generated code treats that as "not fresh", as :func:`_python_fresh`
#: does. Storage uses: the Tensor alone (an input, view, base or detached alias sharing the
#: storage would be a second); references: ``_out`` and getrefcount's argument.
INLINE_TEST = (
    "type(_out) is _T and _refs(_out) <= 2 and _su(_sa(_out)) <= 1"
    if _storage_address is not None
    else "type(_out) is _T and _refs(_out) <= 2 and _su(_out.untyped_storage()._cdata) <= 2"
)
# Decided once: where the address is not available, a temporary storage object is a second user.
_address: Callable[[Any], int] = _storage_address if _storage_address is not None else (lambda t: t.untyped_storage()._cdata)
_ONLY_OWNER = 1 if _storage_address is not None else 2
INLINE_NAMES: dict[str, Any] = {"_T": torch.Tensor, "_refs": _refs, "_su": _storage_uses, "_sa": _storage_address}


def _python_fresh(out: Any) -> bool:
    # References: the caller's variable, this parameter, getrefcount's argument. Storage uses as
    # in INLINE_TEST (plus the temporary storage object where the address is not available).
    if type(out) is not torch.Tensor or _refs(out) > 3:
        return False
    try:
        return _storage_uses(_address(out)) <= _ONLY_OWNER
    except Exception:  # no storage (a sparse Tensor): the full check decides
        return False


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
