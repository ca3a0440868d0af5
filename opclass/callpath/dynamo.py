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

A *lowered* op (``record.lowered``: its kernels are traced into the graph, ``traceable``) gets
more from a class call: a guard on its record (a redefinition, ``add_provider``, recompiles), where
the provider state chooses what is traced, a guard on that state as the call sees it
(``MyOp._opclass_choice``, :func:`choice_token`: a ``use_providers`` block open around the
compiled call, the orders, the mode, ...), so a change recompiles rather than leaving a stale
graph; and the kernels it may trace, with their sources' hashes, on the graph module
(``_opclass_kernels``), which AOTAutogradCache's key pickles: a changed kernel is never served
from the compile cache. ``torch.ops.ns.op(...)`` calls get neither.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from typing import Any, Callable

from opclass.core import after_import
from opclass.install import orders
from opclass.install.record import GUARDED
from opclass.install.tuning import source_hash

__all__ = ["watch", "warn_specialized", "choice_token", "CHOICE", "KERNELS"]

#: The op class attribute (``OpMeta``'s property) a lowered op's class call is guarded on.
CHOICE = "_opclass_choice"
#: The graph module attribute that lists the kernels traced into it, for the compile cache's key.
KERNELS = "_opclass_kernels"

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
            record = self.value.__dict__.get("_opclass_record")
            outs = record.convention.outs if record is not None and dict(record.convention.siblings).get("out") else ()
            if any(n in kwargs for n in outs) and isinstance(sibling := getattr(self.value, "out", None), type):
                # MyOp(x, out=buf): the .out overload's class, as in eager mode.
                return VariableBuilder(tx, AttrSource(self.source, "out"))(sibling).call_function(tx, args, kwargs)
            _warn_if_specialized(record, args, kwargs)
            guarded = record is not None and record.lowered is not None and _guard(tx, self.source, self.value, record)
            op_var = VariableBuilder(tx, AttrSource(self.source, "_opclass_op"))(op)
            result = op_var.call_function(tx, args, kwargs)
            if guarded:
                # Its trace (AOTAutograd, later) reads this from the node: it needs no stale-graph warning.
                node = next((n for n in reversed(tx.output.graph.nodes) if n.op == "call_function" and n.target is op), None)
                if node is not None:
                    node.meta[GUARDED] = True
            return result

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


def _guard(tx: Any, source: Any, cls: type, record: Any) -> bool:
    """Guard a lowered op's class call on what its trace depends on, and list the kernels it may
    trace on the graph module; ``False`` where this torch lacks a part of it (the graph keeps its
    choice, as a ``torch.ops`` call's does)."""
    try:
        from torch._dynamo.guards import GuardBuilder, install_guard
        from torch._dynamo.source import AttrSource
        from torch._dynamo.variables.builder import VariableBuilder

        finalize = tx.output.add_graph_finalizer
        entries, by_state = record.lowered()
        install_guard(AttrSource(source, "_opclass_record").make_guard(GuardBuilder.ID_MATCH))
        if by_state:
            # The constant, wrapped and realized (a lazy one guards only once used), installs dynamo's
            # CONSTANT_MATCH guard on the attribute, read anew on each call of the compiled code, in
            # the caller's context.
            VariableBuilder(tx, AttrSource(source, CHOICE))(getattr(cls, CHOICE)).realize()
    except (ImportError, AttributeError, TypeError):
        return False
    kernels = ", ".join(f"{e.name} {source_hash(e.raw)}" for e in entries)
    finalize(functools.partial(_list_kernels, f"{record.qualname}: {_canonical(record.table.key(orders.current())) if by_state else ''} {kernels}"))
    return True


def _list_kernels(line: str, gm: Any) -> None:
    gm.__dict__[KERNELS] = tuple(sorted({*gm.__dict__.get(KERNELS, ()), line}))


#: Each provider state's key's text; each record's text under the process-wide state, as of a version of it.
_TOKENS: dict[Any, str] = {}
_AS_OF: dict[Any, tuple[int, str]] = {}


def choice_token(cls: type) -> str:
    """What of the provider state a lowered op's trace chose by, as a call in this context sees
    it (``""``: no op, or one whose trace does not choose by it): equal keys give equal text.

    Example:
        >>> import torch, opclass
        >>> class DocsToken(opclass.CustomOp, name="docs_token::neg"):
        ...     traceable = True
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        ...     minus = opclass.provider("cpu")(staticmethod(lambda x: 0 - x))
        >>> with opclass.use_providers({DocsToken: ["default"]}):
        ...     inside = choice_token(DocsToken)
        >>> inside != choice_token(DocsToken) == DocsToken._opclass_choice
        True
        >>> opclass.remove(DocsToken)
    """
    record = cls.__dict__.get("_opclass_record")
    if record is None or record.lowered is None:
        return ""
    # Read on every call of compiled code that calls the op: outside blocks, once per change of the state.
    block, version = orders.BLOCK.get(), orders.version()
    if block is None and (found := _AS_OF.get(record)) is not None and found[0] == version:
        return found[1]
    key = record.table.key(orders.current())
    token = _TOKENS.get(key)
    if token is None:
        if len(_TOKENS) > 256:
            _TOKENS.clear()
        token = _TOKENS[key] = _canonical(key)
    if block is None:
        if len(_AS_OF) > 256:
            _AS_OF.clear()
        _AS_OF[record] = (version, token)
    return token


def _canonical(value: Any) -> str:
    """``repr``, with sets and mappings sorted: the same text in every process (a compile cache's key)."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(map(_canonical, value))) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{_canonical(k)}: {_canonical(v)}" for k, v in value.items())) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(map(_canonical, value)) + ")"
    return repr(value)


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
