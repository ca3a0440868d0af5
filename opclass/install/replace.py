"""Installing a spec: a fresh :class:`OpRecord` registered with the dispatcher, made the live op
of its name, or, if anything fails, the dispatcher and the earlier op left as they were.
``opclass._op`` calls :func:`replace` for every class statement (its examples show the effect).
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
import weakref
from typing import Protocol

import torch

from opclass.define.hookspec import hooks
from opclass.define.spec import OpSpec
from opclass.errors import OpDefinitionError, formatdef
from opclass.install import core, existing
from opclass.install.library import open_library
from opclass.install.plan import build_plan
from opclass.install.record import LOCK, OpRecord, destroy, lookup, set_live

__all__ = ["ClassCalls", "install", "replace"]


class ClassCalls(Protocol):
    """What the class-call layer does for an install (this layer only calls back)."""

    def arm(self, record: OpRecord, cls: type) -> None:
        """Make ``cls`` call ``record``'s op."""

    def retire(self, record: OpRecord) -> None:
        """Point the class of a replaced or removed ``record`` at the live op of its name."""


def install(spec: OpSpec) -> OpRecord:
    """A fresh install of ``spec``: open the op's fragment, run every hook's installer, plan the
    call, register the core kernels. On failure every registration made is dropped again."""
    record = OpRecord(spec)
    # Asked before this install registers anything: does the op run under FakeTensor already?
    needs_fake = not spec.existing or not existing.has_fake(spec.qualname)
    open_library(record)
    lib = record.lib
    try:
        # Registry order, not class-body order: an installer may rely on earlier hooks' results.
        for name, hook in hooks().items():
            if name in spec.hooks:
                if hook.uninstall is not None:
                    # Registered before install: a half-done install is undone too.
                    record.cleanups.append(functools.partial(hook.uninstall, record, spec.hooks[name]))
                lib.installing = name
                hook.install(record, spec.hooks[name])
        lib.installing = None
        if needs_fake and record.fake is None and not record.decomposes:
            core.register_default_fake(record)
        record.plan = build_plan(record, lib.registrations)
        core.register_core(record)
    except BaseException:
        destroy(record)
        raise
    return record


def replace(spec: OpSpec, owner: type, calls: ClassCalls) -> OpRecord:
    """Make ``spec`` the live op of its name, defined by ``owner``, replacing an earlier one.

    One critical section from the name check to the class call: a thread defining the same name
    sees either no op or a complete one. If the install fails, the earlier op is installed afresh
    and its class called on it again; nothing of the failed one remains.
    """
    with LOCK:
        _check_name(spec)
        if spec.existing:
            _check_existing(spec)
        old = lookup(spec.qualname)
        if old is not None:
            destroy(old)
        try:
            record = install(spec)
        except BaseException:
            if old is not None:
                restored = install(old.spec)
                restored.owner = old.owner
                set_live(restored)
                before = old.owner() if old.owner is not None else None
                if before is not None:
                    calls.arm(restored, before)
            raise
        set_live(record)
        record.owner = weakref.ref(owner)
        if old is not None:
            calls.retire(old)
        calls.arm(record, owner)
    if old is not None:
        _warn_if_other_owner(old, owner)
    return record


def _fail(spec: OpSpec, problem: str, fix: str, hook: str | None = None) -> None:
    where = formatdef(spec.cls_name, hook, spec.hooks[hook]) if hook is not None and callable(spec.hooks[hook]) else f"class {spec.cls_name}" if hook is None else f"{spec.cls_name}.{hook}"
    raise OpDefinitionError(spec.cls_name, hook, where, problem, fix)


def _check_name(spec: OpSpec) -> None:
    """The name is free, or opclass owns it (then this class replaces the old op); with
    ``existing=True``, the op exists and another class extending it may be replaced."""
    qualname = spec.qualname
    live = lookup(qualname)
    if live is not None:
        if live.existing == spec.existing:
            return
        before = live.owner() if live.owner is not None else None
        by = f"class {before.__qualname__.rpartition('<locals>.')[2]}" if before is not None else "another class"
        if spec.existing:
            _fail(spec, f"existing=True, but {qualname} is an opclass op ({by} defines it)", "subclass or redefine that class instead")
        _fail(spec, f"{qualname} is defined outside opclass ({by} extends it with existing=True)", "pick another name, or remove the other definition first")
    if spec.existing:
        return
    ns_name, _, overload = qualname.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(ns_name, overload)
    except RuntimeError:
        return
    _fail(spec, f"{qualname} is already defined outside opclass", "pick another name, or remove the other definition first")


def _check_existing(spec: OpSpec) -> None:
    """``existing=True``: the class adds only what the op lacks; it never replaces a kernel."""
    for hook, problem, fix in existing.conflicts(spec.qualname, spec.hooks, hooks(), lookup(spec.qualname)):
        _fail(spec, problem, fix, hook)


def _warn_if_other_owner(old: OpRecord, owner: type) -> None:
    """Warn when a *different* class takes over a name (two ops sharing ``name=`` by mistake); a
    class redefined (same module and qualified name: a notebook cell run again, a reloaded
    module) replaces its op silently."""
    before = old.owner() if old.owner is not None else None
    if before is None or before is owner:
        return
    was, now = f"{before.__module__}.{before.__qualname__}", f"{owner.__module__}.{owner.__qualname__}"
    if was == now:
        return
    warnings.warn(
        f"{now} replaces the op {old.qualname} defined by {was}: two classes give the same name. "
        f"Give one of them another name= (or call opclass.remove({before.__name__}) first if replacing it is intended).",
        UserWarning,
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside opclass (the class statement)."""
    here = os.path.dirname(os.path.dirname(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
