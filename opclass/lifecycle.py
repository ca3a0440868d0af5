"""An op's life, in one place above the layers: class creation, redefinition, the restore after a
failed redefinition, removal, and the switch to the native guard once it is built.

Each step enters each layer once, from here, in order: ``define`` (the class becomes a frozen
spec, everything checked) -> ``install`` (the spec becomes registrations, or nothing) -> the
live table -> ``callpath`` (the class's call attributes). No layer calls back up.

Example:
    >>> import torch, opclass
    >>> class DocsLife(opclass.CustomOp, name="docs_lifecycle::f", schema="(Tensor x) -> Tensor"):
    ...     default = staticmethod(lambda x: 2 * x)
    >>> first = DocsLife.record
    >>> class DocsLife(opclass.CustomOp, name="docs_lifecycle::f", schema="(Tensor x) -> Tensor"):
    ...     default = staticmethod(lambda x: 3 * x)
    >>> first.live, DocsLife.record.live, DocsLife(torch.ones(1))
    (False, True, tensor([3.]))
    >>> opclass.remove(DocsLife)
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable

from opclass.callpath import classcall
from opclass.core import memo, native
from opclass.define.builder import OpBuilder
from opclass.define.conventions import DERIVED
from opclass.define.spec import OpSpec
from opclass.errors import user_stacklevel
from opclass.install import orders
from opclass.install import record as records
from opclass.install.installer import check_name, defined_outside, in_place, install
from opclass.install.plan import build_plan
from opclass.install.table import LOADED
from opclass.install.tuning import refusal

__all__ = ["define", "redefine", "refresh", "remove", "remove_namespace", "FIRST"]

#: Run once, before the first class statement defines an op, then emptied (``opclass._op`` puts
#: the loading of the installed plugins here; a callback run earlier by other means takes itself out).
FIRST: list[Callable[[], object]] = []


#: The base class of every op class (``CustomOp``; ``opclass._op`` puts it here): the classes of an
#: op's other overloads derive from it.
ROOT: list[type] = []


def define(cls: type, given: dict[str, Any], unknown: dict[str, Any]) -> None:
    """A class statement, top to bottom: collect -> validate -> spec -> install -> class call."""
    if cls.__dict__.get(DERIVED):  # an overload's class (_sibling_class): its op is installed with the class's
        return
    orders.check_env()
    while FIRST:
        try:
            first = FIRST.pop(0)
        except IndexError:  # another thread's first class statement took it
            break
        first()
    builder = OpBuilder(cls, given, unknown, outside=defined_outside)
    cls._opclass_given = given  # type: ignore[attr-defined]  # for redefine()
    with memo.one_definition():
        cls._opclass_keywords = builder.collect()  # type: ignore[attr-defined]  # hooks and keywords in force
        spec = builder.validate()  # every check passed: the frozen spec (None: an abstract base)
        if spec is None:
            classcall.make_abstract(cls)  # calling it says it is no op
            return
        native.build_in_background(_switch_to_native)
        for sibling in spec.siblings:  # before anything is installed: a name taken outside opclass
            check_name(sibling)
        record, old = _install_live(cls, spec)
        gone = {q for _, q in old.convention.siblings} - {s.qualname for s in spec.siblings} if old is not None else set()
        for sibling in spec.siblings:
            _install_live(_sibling_class(cls, sibling), sibling)
        for qualname in gone:
            for taken in records.take_live(qualname=qualname):
                _retire(taken)
    classcall.document(cls, spec)  # signature and docstring
    if old is not None:
        _warn_if_other_owner(old, cls)
    for named in orders.near_misses(spec.qualname, lambda name: records.lookup(name) is not None):
        warnings.warn(f"{orders.ENV} names {named}, which is no op (yet): did you mean {spec.qualname}, defined here?", UserWarning, stacklevel=user_stacklevel())
    tuned = orders.global_state().tuned.get(spec.qualname)
    if tuned is not None and (why := refusal(tuned, {e.name: e.raw for e in record.table.entries})) is not None:
        loaded = orders.TUNING_ENV if spec.qualname in orders.ENV_STATE.tuned else "opclass.load_tuning"
        warnings.warn(f"{loaded}: the tuning table of {spec.qualname} does not fit the op defined here, so it is not used: {why}. Tune it again here: opclass.tune_providers({cls.__name__}, samples).save(path)", UserWarning, stacklevel=user_stacklevel())


def _install_live(cls: type, spec: OpSpec) -> tuple[records.OpRecord, records.OpRecord | None]:
    """Install ``spec`` as the live op of its name, called by ``cls``; returns the install, and the one it replaced."""
    # One critical section from the name check to the class call: a thread defining the same
    # name sees either no op or a complete one.
    with records.LOCK:
        check_name(spec)
        old = records.lookup(spec.qualname)
        try:
            # In place where it can be: torch's dispatcher is not safe to write while other
            # threads call the op, and a class statement run again registers the same kernels.
            record = install(spec, replacing=old) if in_place(spec, old) else None
            if record is None:
                if old is not None:
                    records.destroy(old)
                record = install(spec)
        except BaseException:
            if old is not None:
                records.destroy(old)
                _restore(old)
            raise
        # Armed before it is live: a replaced class's call follows the live record to its class.
        record.owner = weakref.ref(cls)
        classcall.arm(record, cls)
        records.set_live(record)
        if old is not None and old.owner() is not cls:  # redefine() arms the same class again
            classcall.retire(old)
    if spec.convention.kind != "functional":
        classcall.document(cls, spec)
    return record, old


def _sibling_class(cls: type, spec: OpSpec) -> type:
    """The class that calls one of the other overloads of ``cls``'s op (``MyOp.out``), kept across redefinitions."""
    kind = spec.convention.kind
    found = cls.__dict__.get(kind)
    if not (isinstance(found, type) and found.__dict__.get(DERIVED)):
        namespace = {DERIVED: True, "__module__": cls.__module__, "__qualname__": f"{cls.__qualname__}.{kind}", "__doc__": f"The {kind} overload of {cls.__qualname__}."}
        found = type(cls)(kind, (ROOT[0],), namespace)
        setattr(cls, kind, found)
    return found


def _restore(old: records.OpRecord) -> None:
    """A redefinition failed: the old op, installed afresh from its spec (the hooks it was
    validated with), live again, its class armed again."""
    restored = install(old.spec)
    restored.owner = old.owner
    records.set_live(restored)
    before = old.owner()
    if before is not None:
        classcall.arm(restored, before)


def redefine(record: records.OpRecord, undo: Callable[[], object] = lambda: None) -> None:
    """Define the class of ``record`` again, as its class statement did (what is added to an op
    from outside its class, such as a provider, takes effect): validated anew, installed anew;
    if anything fails, ``undo()`` takes back what was added and the op stays as it was."""
    if record.convention.kind != "functional":  # an overload of another class statement's op
        record = records.lookup(record.convention.base) or record
    try:
        cls = record.owner()
        if cls is None:
            raise RuntimeError(f"{record.qualname}: its class is gone; define it again")
        define(cls, cls._opclass_given, {})
    except BaseException:
        undo()
        raise


def refresh(record: records.OpRecord) -> None:
    """The process-wide provider orders or mode changed: compile ``record``'s choice again, plan
    the call again and arm the class again; the dispatcher's registrations stay."""
    with records.LOCK:
        if not record.live or record.lib is None:
            return
        record.table.refresh()
        record.plan = build_plan(record, record.lib.registrations)
        record.functions = None
        cls = record.owner()
        if cls is not None:
            classcall.arm(record, cls)


# A lazy provider loaded (chosen for a call, or asked whether it is available): its op's choices
# are compiled again, without the predicate that loaded it.
LOADED.append(refresh)


def remove(op: Any) -> None:
    """Remove an op's registrations (takes the op class or its qualified name): the op is gone from
    ``torch.ops`` and its class stops working. Redefining a class replaces its op without it.

    Example:
        >>> import torch, opclass
        >>> class DocsRemoved(opclass.CustomOp, name="docs_remove::twice"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return 2 * x
        >>> opclass.remove(DocsRemoved)
        >>> hasattr(torch.ops.docs_remove, "twice")
        False
    """
    qualname = op if isinstance(op, str) else getattr(op, "qualname", None)
    if not isinstance(qualname, str):
        raise TypeError(f"opclass.remove() takes a CustomOp class or a qualified name, not {op!r}")
    with records.LOCK:
        for record in records.take_live(qualname=qualname):
            _retire(record)
            for _, sibling in record.convention.siblings:
                for taken in records.take_live(qualname=sibling):
                    _retire(taken)


def _retire(record: records.OpRecord) -> None:
    classcall.retire(record)
    # An order set in code for it goes with it (it would refuse a later class of that name), and a table loaded in code.
    orders.set_order(record.qualname, None)
    orders.set_tuned(record.qualname, None)


def remove_namespace(namespace: str) -> None:
    """Remove every op opclass defined in ``namespace`` (a test fixture's clean-up).

    Example:
        >>> import opclass
        >>> opclass.remove_namespace("docs_nothing_here")
    """
    with records.LOCK:
        for record in records.take_live(namespace=namespace):
            _retire(record)


def _switch_to_native(activate: Callable[[], None]) -> int:
    """The native guard is built: use it, and arm every live class again for it."""
    with records.LOCK:
        activate()
        classes = [(record, cls) for record in records.live_records() if (cls := record.owner()) is not None]
        for record, cls in classes:
            classcall.arm(record, cls)
        return len(classes)


def _warn_if_other_owner(old: records.OpRecord, owner: type) -> None:
    """Warn when a *different* class takes over a name (two ops sharing ``name=`` by mistake); a
    class redefined (same module and qualified name: a notebook cell run again, a reloaded
    module) replaces its op silently."""
    before = old.owner()
    if before is None or before is owner:
        return
    was, now = f"{before.__module__}.{before.__qualname__}", f"{owner.__module__}.{owner.__qualname__}"
    if was == now:
        return
    warnings.warn(
        f"{now} replaces the op {old.qualname} defined by {was}: two classes give the same name. "
        f"Give one of them another name= (or call opclass.remove({before.__name__}) first if replacing it is intended).",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


