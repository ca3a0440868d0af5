"""Installing a spec: a fresh :class:`OpRecord` registered with the dispatcher, or, if anything
fails, nothing registered. It runs the hooks the spec was validated with (``spec.registry``) and
no others, so a restore installs exactly what was validated, whatever the registry holds now.
The lifecycle (:mod:`opclass.lifecycle`) calls it for every class statement, redefinition and
restore; this layer returns what it made and calls nothing above it.
"""

from __future__ import annotations

import functools

import torch

from opclass.define.spec import OpSpec
from opclass.errors import definition_error
from opclass.install import existing
from opclass.install.library import open_library
from opclass.install.own_kernels import register_own_kernels
from opclass.install.plan import build_plan
from opclass.install.record import OpRecord, destroy, lookup

__all__ = ["install", "check_name"]


def install(spec: OpSpec) -> OpRecord:
    """A fresh install of ``spec``: open the op's fragment, run each hook's installer (in the
    order of ``spec.registry``), then the fallbacks of the hooks the class does not define, plan
    the call, register opclass's own kernels. On failure every registration made is dropped again."""
    record = OpRecord(spec)
    # Asked before this install registers anything: does the op run under FakeTensor already?
    record.had_fake = spec.existing and existing.has_fake(spec.qualname)
    open_library(record)
    lib = record.lib
    try:
        for hook in spec.registry:
            if hook.name in spec.hooks:
                value = spec.hooks[hook.name]
                if hook.uninstall is not None:
                    # Registered before install: a half-done install is undone too.
                    record.cleanups.append(functools.partial(hook.uninstall, record, value))
                lib.installing = hook.name
                hook.install(record, value)
        for hook in spec.registry:
            if hook.fallback is not None and hook.name not in spec.hooks:
                lib.installing = hook.name
                hook.fallback(record)
        lib.installing = None
        record.plan = build_plan(record, lib.registrations)
        register_own_kernels(record)
    except BaseException:
        destroy(record)
        raise
    return record


def _fail(spec: OpSpec, problem: str, fix: str, hook: str | None = None) -> None:
    raise definition_error(spec.cls_name, hook, spec.hooks.get(hook or ""), problem, fix)


def check_name(spec: OpSpec) -> None:
    """The name is free, or opclass owns it (then this class replaces the old op); with
    ``existing=True``, the op exists, and the class adds only what it lacks (another class
    extending it may be replaced)."""
    qualname = spec.qualname
    live = lookup(qualname)
    if live is not None and live.existing != spec.existing:
        before = live.owner()
        by = f"class {before.__qualname__.rpartition('<locals>.')[2]}" if before is not None else "another class"
        if spec.existing:
            _fail(spec, f"existing=True, but {qualname} is an opclass op ({by} defines it)", "subclass or redefine that class instead")
        _fail(spec, f"{qualname} is defined outside opclass ({by} extends it with existing=True)", "pick another name, or remove the other definition first")
    if spec.existing:
        registry = {h.name: h for h in spec.registry}
        for hook, problem, fix in existing.conflicts(qualname, spec.hooks, registry, live):
            _fail(spec, problem, fix, hook)
        return
    if live is not None:
        return
    ns_name, _, overload = qualname.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(ns_name, overload)
    except RuntimeError:
        return
    _fail(spec, f"{qualname} is already defined outside opclass", "pick another name, or remove the other definition first")
