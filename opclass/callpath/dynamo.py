"""torch.compile sees a call of an op class as a call of its ``OpOverload``: one node, traced as cheaply.

Dynamo ignores a metaclass ``__call__`` (and ``OpMeta``'s C vectorcall) and would trace ``MyOp(x)``
as an instantiation, inlining ``__new__``. torch has no public way to make a class call trace as
another callable (``allow_in_graph`` puts the class in the graph; ``substitute_in_graph`` takes
functions only), so dynamo's exact-type table ``VariableBuilder._type_dispatch()`` (the same in
torch 2.11 to 2.15) gets an entry for ``OpMeta``: dynamo's own wrapping for a class (its guards
and attribute reads), made an ``OpClassVariable`` that reads ``MyOp(...)`` as
``MyOp._opclass_op(...)``. Without the table, class calls trace through ``__new__`` as before.

The op is read through ``AttrSource(MyOp, "_opclass_op")``, so compiled code is guarded on it:
removing or redefining the class sets it to ``None`` and the retrace takes dynamo's usual path
(the retired class redirects to the live op), as do abstract bases and classes without a source.
Registration waits until ``torch._dynamo`` is imported (:mod:`opclass.core.after_import`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Callable

from opclass.core import after_import

__all__ = ["watch", "warn_specialized"]

_DYNAMO = "torch._dynamo"
_LOCK = threading.RLock()
#: Metaclasses of op classes whose instances dynamo should trace as their op.
_WANTED: set[type] = set()
#: Those already in dynamo's table.
_DONE: set[type] = set()
#: dynamo's dispatch tables and the entry to put in them, once found (None: not yet, or this torch lacks them).
_TABLES: tuple[list[dict[object, Callable[..., Any]]], Callable[..., Any]] | None = None
_UNSUPPORTED = False


def watch(meta: type) -> None:
    """Have dynamo trace calls of classes whose metaclass is ``meta`` as calls of their op (cheap
    and import-free when called again for the same metaclass: once per op definition)."""
    if meta in _DONE or _UNSUPPORTED:
        return
    with _LOCK:
        _WANTED.add(meta)
    after_import.call_after_import(_DYNAMO, _register)


def _register() -> None:
    """Put every wanted metaclass in dynamo's type-dispatch tables (``torch._dynamo`` is imported)."""
    global _TABLES, _UNSUPPORTED
    with _LOCK:
        if _UNSUPPORTED:
            return
        if _TABLES is None:
            with contextlib.suppress(Exception):  # another torch: keep dynamo's usual path
                _TABLES = _dispatch_tables()
            if _TABLES is None:
                _UNSUPPORTED = True
                return
        tables, wrap_op_class = _TABLES
        for meta in _WANTED - _DONE:
            for table in tables:
                table.setdefault(meta, wrap_op_class)
            _DONE.add(meta)


def _dispatch_tables() -> tuple[list[dict[object, Callable[..., Any]]], Callable[..., Any]] | None:
    """dynamo's exact-type dispatch tables (one per ``config.trace_numpy`` value) and the entry
    that wraps an op class, or ``None``."""
    from torch._dynamo.source import AttrSource
    from torch._dynamo.variables.builder import VariableBuilder
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    impl = getattr(VariableBuilder, "_type_dispatch_impl", None)
    if impl is None or not callable(getattr(VariableBuilder, "_wrap", None)):
        return None
    tables = [impl(False), impl(True)]
    if not all(isinstance(t, dict) for t in tables):
        return None

    class OpClassVariable(UserDefinedClassVariable):
        """An op class: calling it is calling ``cls._opclass_op``; all else as for any class."""

        def call_function(self, tx: Any, args: Any, kwargs: Any) -> Any:
            # The class's own op (classcall.arm sets it on each op class; retiring clears it),
            # never one inherited by a class that is no op itself.
            op = self.value.__dict__.get("_opclass_op")
            if op is None or self.source is None:
                return super().call_function(tx, args, kwargs)
            _warn_if_specialized(self.value.__dict__.get("_opclass_record"), args, kwargs)
            op_var = VariableBuilder(tx, AttrSource(self.source, "_opclass_op"))(op)
            return op_var.call_function(tx, args, kwargs)

    def wrap_op_class(builder: Any, value: type) -> Any:
        """dynamo's wrapping of the class ``value``, with calls of it read as calls of its op."""
        plain = {t: f for t, f in builder._type_dispatch().items() if f is not wrap_op_class}
        # An instance attribute shadows the classmethod for this one wrap (a builder wraps one value).
        builder._type_dispatch = lambda: plain
        try:
            variable = builder._wrap(value)
        finally:
            del builder._type_dispatch
        if type(variable) is UserDefinedClassVariable:
            variable.__class__ = OpClassVariable
        return variable

    return tables, wrap_op_class


_WARNED: set[tuple[str, str]] = set()


def warn_specialized(record: Any, name: str) -> None:
    """Once per op and parameter: a symbolic size reached the plain ``int`` (``opclass.Int``)
    parameter ``name``, which torch specializes to its value."""
    if (record.qualname, name) in _WARNED:
        return
    _WARNED.add((record.qualname, name))
    warnings.warn(
        f"{record.qualname} ({record.cls_name}): {name!r} is opclass.Int (a plain int) and gets a symbolic size, which torch "
        f"specializes to one value: torch.compile recompiles for every new value, and torch.export refuses a dynamic Dim (its "
        f"suggested fix, a static Dim, is not the one to take). Annotate {name} as int (SymInt) to keep the size symbolic, "
        "or pass a constant",
        UserWarning,
        stacklevel=3,
    )


def _warn_if_specialized(record: Any, args: Any, kwargs: Any) -> None:
    """:func:`warn_specialized` for a call dynamo traces (its arguments are VariableTrackers)."""
    from torch._dynamo.variables.tensor import SymNodeVariable

    for a in record.arguments if record is not None else ():
        value = kwargs.get(a.name) if a.keyword_only or a.index >= len(args) else args[a.index]
        if a.plain_int and isinstance(value, SymNodeVariable):
            warn_specialized(record, a.name)
