"""Kernels torch.compile must not trace when they run eagerly."""

from __future__ import annotations

from typing import Any, TypeVar

F = TypeVar("F")

try:  # C, loaded with torch (importing torch._dynamo would cost about a second)
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    _SKIP: Any = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
except (ImportError, AttributeError):
    _SKIP = None


def shield(fn: F) -> F:
    """Keep torch.compile from tracing ``fn`` (and what it calls) when it runs eagerly, e.g. a kernel
    after a graph break, as custom_op's ``torch._disable_dynamo`` wrapper does, but by marking the
    code object: no wrapper frame on the call path. Tracing a call of the op is not affected
    (it is one node). Returns ``fn``."""
    code = getattr(fn, "__code__", None)
    if _SKIP is not None and code is not None:
        set_code_exec_strategy(code, _SKIP)
    return fn
