"""Run code right after a module is imported, by whoever imports it.

Importing ``torch._dynamo`` or ``torch.distributed.tensor`` at op definition is too dear, yet an
op must be known to them once they are there. A finder on ``sys.meta_path`` watches for the
module, lets the other finders find it, and wraps that loader's ``exec_module`` for this one
import. An import that fails leaves the callbacks waiting for the next one.

Example:
    >>> from opclass.core import after_import
    >>> seen = []
    >>> after_import.call_after_import("json", lambda: seen.append("json"))
    >>> seen
    ['json']
"""

from __future__ import annotations

import sys
import threading
import warnings
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Callable, Sequence

_LOCK = threading.RLock()
_WAITING: dict[str, list[Callable[[], None]]] = {}


def imported(name: str) -> bool:
    """``name`` is imported and has finished executing (not just begun: a callback run from
    inside the module's own import would see it half made)."""
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def call_after_import(name: str, callback: Callable[[], None]) -> None:
    """``callback()`` now if module ``name`` is imported, else once, right after it is."""
    with _LOCK:
        if not imported(name):
            waiting = _WAITING.setdefault(name, [])
            if callback not in waiting:
                waiting.append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback()


def cancel(name: str, callback: Callable[[], None]) -> None:
    """Forget a callback that has not run yet."""
    with _LOCK:
        waiting = _WAITING.get(name, [])
        if callback in waiting:
            waiting.remove(callback)
        if not waiting:
            _WAITING.pop(name, None)
        if not _WAITING and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def _run(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception as e:  # never break the user's import
            warnings.warn(f"opclass: after importing a torch module: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)


class _AfterImport(MetaPathFinder):
    """Finds nothing itself: makes the loader of a watched module run the callbacks."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        with _LOCK:
            callbacks = _WAITING.pop(fullname, None)
            if callbacks is None:
                return None
            if not _WAITING and self in sys.meta_path:
                sys.meta_path.remove(self)
        finders = [f.find_spec for f in sys.meta_path if f is not self and getattr(f, "find_spec", None) is not None]
        spec = next((s for find in finders if (s := find(fullname, path, target)) is not None), None)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or loader is None or exec_module is None:
            _rearm(fullname, callbacks)
            return spec

        def exec_then_run(module: ModuleType) -> None:
            try:
                exec_module(module)
            except BaseException:
                _rearm(fullname, callbacks)  # the import failed: wait for the next one
                raise
            finally:
                vars(loader).pop("exec_module", None)  # the loader's own method again
            _run(callbacks)

        try:
            setattr(loader, "exec_module", exec_then_run)
        except (AttributeError, TypeError):  # a loader that takes no attributes
            _rearm(fullname, callbacks)
        return spec


def _rearm(name: str, callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        call_after_import(name, callback)


_FINDER = _AfterImport()
