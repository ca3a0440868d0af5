"""The output contract of ops that promise fresh outputs: a cheap pre-check, then the full one."""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
from torch import _C

from . import _native

_refs = sys.getrefcount


def _python_fresh(out: Any) -> bool:
    # References: the caller's variable, this parameter, getrefcount's argument.
    return type(out) is torch.Tensor and _refs(out) <= 3 and out._base is None


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
