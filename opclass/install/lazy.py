"""Lazy kernels: a provider named ``"module:attr"`` (``opclass.add_provider`` with a string),
whose module is imported only when the provider is first needed: chosen for a call, checked,
tuned. Its kernel table entry (:mod:`opclass.install.table`) stands for it until then.

Example:
    >>> from opclass.install.lazy import Lazy
    >>> Lazy("math:sqrt").load()[0](4.0), Lazy("no_such_module_here:f").load()[1]
    (2.0, "import of no_such_module_here failed: ModuleNotFoundError: No module named 'no_such_module_here'")
"""

from __future__ import annotations

import functools
import importlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from opclass.define.schema import annotated, annotation_problem, kernel_signature_problem
from opclass.errors import first_line

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

__all__ = ["Lazy"]


class Lazy:
    """A kernel named ``"module:attr"``: its module is imported when the kernel is first needed
    (:meth:`Entry.available`), never before; any exception from the import makes it unavailable
    for good, with that error as the reason. :attr:`stub` stands for it, and forwards to it."""

    def __init__(self, target: str) -> None:
        module, _, attr = target.partition(":")
        if not all(part.isidentifier() for part in (*module.split("."), *attr.split("."))):
            raise ValueError(f"{target!r} names no function to load: write 'package.module:function'")
        self.target, self.module, self.attr = target, module, attr
        self._found: tuple[Callable[..., Any] | None, str] | None = None

        def stub(*args: Any, **kwargs: Any) -> Any:
            fn, why = self.load()
            if fn is None:
                raise RuntimeError(f"{target} cannot run: {why}")
            return fn(*args, **kwargs)

        stub.__annotations__ = {}  # no schema of its own: it is checked against the op's when it loads
        self.stub = stub

    def load(self, record: OpRecord | None = None) -> tuple[Callable[..., Any] | None, str]:
        """``(the function, "")``, or ``(None, why it cannot be had)``; imported once per process.
        With ``record``: checked against the op's signature too, as class creation checks an
        unannotated or partly annotated kernel (a mismatch is a reason it cannot be had)."""
        if record is not None and record.convention.kind == "functional":  # another overload's adapter calls it as the functional op does
            fn, why = self.load()
            problem = None if fn is None else (annotation_problem(fn, record.schema) if annotated(fn) else None) or kernel_signature_problem(fn, record.arguments)
            return (None, f"{self.target} does not fit {record.qualname}: {problem}") if problem else (fn, why)
        if self._found is None:
            try:
                module = importlib.import_module(self.module)
            except (Exception, SystemExit) as e:  # whatever the module raises, the op keeps working
                self._found = (None, f"import of {self.module} failed: {first_line(e)}")
                return self._found
            try:
                found: Any = functools.reduce(getattr, self.attr.split("."), module)
                self._found = (found, "") if callable(found) else (None, f"{self.target} is {found!r}, not a function")
            except AttributeError as e:
                self._found = (None, f"{self.module} has no attribute {self.attr!r} ({first_line(e)})")
        return self._found

    def __repr__(self) -> str:
        return f"Lazy({self.target!r})"

    def settle(self, entry: Any, declared: Any, loaded: Sequence[Callable[[OpRecord], object]]) -> None:
        """Load the kernel a pending kernel-table ``entry`` stands for, checked against its op's
        signature; a failure makes the entry unavailable for good. Then the op's choices are
        compiled again (``loaded``), without the predicate that loaded it."""
        record = entry.table.record
        fn, why = self.load(record)
        with _SETTLING:
            if not entry.pending:  # another thread loaded it
                return
            if why:
                entry._available = (False, why)  # its predicate stays: a choice compiled before declines it
            else:
                entry.options = declared
                if getattr(entry.fn, "__code__", None) is self.stub.__code__ and fn is not None:  # no wrapper around the stub
                    entry.fn = entry.raw = fn
                    entry.checked = record.outputs.checked(entry.where, fn)
            entry.pending = False
        entry.table._memo.clear()  # the choices compiled with its predicate
        for callback in loaded:
            callback(record)


_SETTLING = threading.Lock()
