"""Installing a spec: a fresh :class:`OpRecord` registered with the dispatcher, or, if anything
fails, nothing registered. It runs the hooks the spec was validated with (``spec.registry``) and
no others, so a restore installs exactly what was validated, whatever the registry holds now.
The lifecycle (:mod:`opclass.lifecycle`) calls it for every class statement, redefinition and
restore; this layer returns what it made and calls nothing above it.
"""

from __future__ import annotations

import functools
from typing import Callable, overload

from opclass.define.schema import op_exists
from opclass.define.spec import OpSpec
from opclass.errors import definition_error
from opclass.install import conventions, existing
from opclass.install.library import open_library
from opclass.install.own_kernels import register_own_kernels
from opclass.install.plan import build_plan
from opclass.install.record import OpRecord, destroy, lookup, undo_hooks

__all__ = ["install", "in_place", "check_name", "defined_outside"]


@overload
def install(spec: OpSpec) -> OpRecord: ...
@overload
def install(spec: OpSpec, replacing: OpRecord | None) -> OpRecord | None: ...
def install(spec: OpSpec, replacing: OpRecord | None = None) -> OpRecord | None:
    """A fresh install of ``spec``: the op's fragment, each hook's installer (in the order of
    ``spec.registry``), the kernel table's registrations, the fallbacks of the hooks the class does
    not define, the plan, opclass's own kernels. On failure every registration made is dropped again.

    With ``replacing`` (the live install of the name; see :func:`in_place`), in place: the install
    goes into a shadow fragment, and if it registers exactly what ``replacing`` registered, the
    live registrations call the new functions from then on (torch's dispatcher is not written,
    so calls on other threads go on) and ``replacing`` keeps no fragment; ``None`` if it would
    register anything else (``replacing``'s hooks are uninstalled then, nothing else changed)."""
    record = OpRecord(spec)
    # Asked before this install registers anything: does the op run under FakeTensor already?
    record.had_fake = spec.existing and existing.has_fake(spec.qualname)
    if replacing is not None:
        undo_hooks(replacing)  # before the new ones install theirs, which may have the same keys
    open_library(record, replacing.lib if replacing is not None else None)
    lib = record.lib
    # The class statement has out=, inplace= or a kernel of another style (opclass.style).
    conventional = bool(spec.convention.base)
    base: Callable[[], OpRecord | None] = (lambda: record) if spec.convention.kind == "functional" else (lambda: lookup(spec.convention.base))
    try:
        for hook in spec.registry:
            if hook.name in spec.hooks:
                value = conventions.adapted(record, hook, spec.hooks[hook.name], base) if conventional else spec.hooks[hook.name]
                if hook.uninstall is not None:
                    # Registered before install: a half-done install is undone too.
                    record.cleanups.append(functools.partial(hook.uninstall, record, value))
                lib.installing = hook.name
                hook.install(record, value)
        record.table.register()  # each slot once, from every hook's entries
        if conventional:
            conventions.install(record, base)  # before the fallbacks: the .out overload's fake kernel is its own
        for hook in spec.registry:
            if hook.fallback is not None and hook.name not in spec.hooks:
                lib.installing = hook.name
                hook.fallback(record)
        lib.installing = None
        record.plan = build_plan(record, lib.registrations, {r.key for r in replacing.lib.registrations} if replacing is not None else ())
        register_own_kernels(record)
    except BaseException:
        destroy(record)
        raise
    if replacing is not None:
        taken = lib.take_over()
        if taken is None:
            destroy(record)
            return None
        lib._destroy()  # the shadow registered nothing with torch
        record.lib, replacing.lib = taken, None
    return record


def in_place(spec: OpSpec, live: OpRecord | None) -> bool:
    """Can ``spec`` be installed over ``live`` in place (``install(spec, replacing=live)``)? Not
    for an op defined elsewhere (``existing=True``), nor where the config classes differ."""
    return live is not None and live.lib is not None and not spec.existing and not live.existing and spec.configs == live.configs


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
        for hook, problem, fix in existing.conflicts(qualname, spec.hooks, {h.name: h for h in spec.registry}, live):
            _fail(spec, problem, fix, hook)
        return
    if defined_outside(qualname):
        _fail(spec, f"{qualname} is already defined outside opclass", "pick another name, or remove the other definition first")


def defined_outside(qualname: str) -> bool:
    """``qualname`` (``"ns::op"`` or ``"ns::op.overload"``) is an op the dispatcher has and opclass did not define."""
    return lookup(qualname) is None and op_exists(qualname)
