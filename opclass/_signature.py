"""``inspect.signature`` of the user's hooks, computed once per class definition.

Defining one op reads each hook's signature in several places (schema derivation, the hooks'
checks and installers, the call plan), and ``inspect.signature`` is one of the dearer steps of a
definition. Within :func:`one_definition` each function's signature is computed once; outside
it, every call computes it afresh, since a function's signature may change between definitions
(``__signature__``, ``__wrapped__``, ``__defaults__`` are writable).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from typing import Any, Iterator

_LOCAL = threading.local()


@contextlib.contextmanager
def one_definition() -> Iterator[None]:
    """Share signatures for the duration of one class definition (in this thread)."""
    if getattr(_LOCAL, "cache", None) is not None:  # a class defined while defining one
        yield
        return
    _LOCAL.cache = {}
    try:
        yield
    finally:
        _LOCAL.cache = None


def signature(fn: Any) -> inspect.Signature:
    """``inspect.signature(fn)``, shared within one definition (errors are raised every time)."""
    cache: dict[int, tuple[Any, inspect.Signature]] | None = getattr(_LOCAL, "cache", None)
    if cache is None:
        return inspect.signature(fn)
    hit = cache.get(id(fn))
    if hit is not None:
        return hit[1]
    sig = inspect.signature(fn)
    cache[id(fn)] = (fn, sig)  # fn kept alive with its entry: its id cannot be reused meanwhile
    return sig
