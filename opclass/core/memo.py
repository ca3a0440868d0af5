"""Facts about the user's functions (signature, evaluated annotations), computed once per class
definition: several steps read them, and they are among the dearer parts of a definition.
Outside :func:`one_definition` every call computes afresh, since a function may change between
definitions (``__signature__``, ``__annotations__``... are writable).

Example:
    >>> from opclass.core import memo
    >>> with memo.one_definition():
    ...     memo.signature(len) is memo.signature(len)
    True
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from typing import Any, Callable, Iterator, TypeVar

_LOCAL = threading.local()
_T = TypeVar("_T")


@contextlib.contextmanager
def one_definition() -> Iterator[None]:
    """Share the facts for the duration of one class definition (in this thread)."""
    if getattr(_LOCAL, "cache", None) is not None:  # a class defined while defining one
        yield
        return
    _LOCAL.cache = {}
    try:
        yield
    finally:
        _LOCAL.cache = None


def once(kind: str, fn: Any, compute: Callable[[Any], _T]) -> _T:
    """``compute(fn)``, shared within one definition; an error is raised every time it is asked."""
    cache: dict[tuple[str, int], tuple[Any, Any]] | None = getattr(_LOCAL, "cache", None)
    if cache is None:
        return compute(fn)
    hit = cache.get((kind, id(fn)))
    if hit is not None:
        return hit[1]  # type: ignore[no-any-return]
    value = compute(fn)
    cache[(kind, id(fn))] = (fn, value)  # fn kept alive with its entry: its id cannot be reused meanwhile
    return value


def signature(fn: Any) -> inspect.Signature:
    """``inspect.signature(fn)``, shared within one definition."""
    return once("signature", fn, inspect.signature)
