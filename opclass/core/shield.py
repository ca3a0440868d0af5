"""Kernels torch.compile must not trace when they run eagerly, and Triton launches that skip
torch's higher-order op when they run eagerly."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

from torch._library import triton as _torch_triton

F = TypeVar("F")

try:  # C, loaded with torch (importing torch._dynamo would cost about a second)
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    _SKIP: Any = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
except (ImportError, AttributeError):
    _SKIP = None


def shield(fn: F) -> F:
    """Keep torch.compile from tracing ``fn`` (and what it calls) when it runs eagerly (a kernel after
    a graph break), as custom_op's ``torch._disable_dynamo`` does, but by marking the code object: no
    wrapper frame on the call path. A traced call of the op is one node, unaffected. Returns ``fn``."""
    code = getattr(fn, "__code__", None)
    if _SKIP is not None and code is not None:
        set_code_exec_strategy(code, _SKIP)
    return fn


# torch's own switch (triton_op's kernels flip it the same way); a thread-local, read per launch.
_WRAP = _torch_triton.wrap_triton_enabled


def eager_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with ``wrap_triton`` off: eager launches skip the higher-order op (as triton_op's do)."""

    @functools.wraps(fn)
    def eager(*args: Any, **kwargs: Any) -> Any:
        before = getattr(_WRAP, "value", _torch_triton.wrap_triton_enabled_default)
        _WRAP.value = False
        try:
            return fn(*args, **kwargs)
        finally:
            _WRAP.value = before

    return shield(eager)
