"""The hook registry: the one way any overridable static method of ``CustomOp`` comes to exist.

opclass's own hooks (``cpu``, ``abstract``, ``backward``...) are registered here exactly as a third
party registers a new one, so whatever a built-in hook can do, an extension can do too. A hook
carries everything the rest of opclass must know about it (whether it is a kernel, which
dispatch keys its kernels occupy, what it needs beside it), so nothing else names a hook.

Example:
    >>> from opclass.define.hookspec import hooks
    >>> hooks()["cpu"].backend, hooks()["backward"].requires
    (True, ('setup_context',))
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

import torch

from opclass.core import memo
from opclass.errors import definition_error

if TYPE_CHECKING:
    from opclass.define.arguments import Arguments
    from opclass.install.record import OpRecord  # the install layer is above this one: types only

__all__ = ["Hook", "HookContext", "MEMBER_OF", "ADDED_BY", "OPTIONAL", "register_hook", "unregister_hook", "hooks"]


@dataclasses.dataclass
class HookContext:
    """What a hook's ``check`` sees about the class being defined.

    ``schema`` is the parsed op schema, ``arguments`` its arguments (an
    :class:`~opclass.define.arguments.Arguments` table: names, types, defaults, which are
    written) and ``signature`` the op's Python signature; ``defined`` maps every hook the class
    defines (or inherits) to its value, and ``hooks`` every hook the class is validated with by
    name; ``existing``: the class extends an op defined elsewhere. ``fail`` raises the error for
    this hook.

    Example:
        >>> def check(fn, ctx):
        ...     if len(ctx.schema.returns) != 1:
        ...         ctx.fail("needs an op with exactly one output", "drop the hook or return one Tensor")
    """

    cls_name: str
    hook: str
    value: Any
    qualname: str
    schema: torch._C.FunctionSchema
    signature: Any
    defined: Mapping[str, Any]
    tags: tuple[torch.Tag, ...]
    arguments: Arguments
    hooks: Mapping[str, Hook]
    existing: bool = False

    def fail(self, problem: str, fix: str = "") -> NoReturn:
        """Raise :class:`OpDefinitionError` for this hook, quoting the user's definition."""
        raise definition_error(self.cls_name, self.hook, self.value, problem, fix)


@dataclasses.dataclass(frozen=True)
class Hook:
    """An overridable class attribute of ``CustomOp``: its name, a check, and an installer.

    Args:
        name: the attribute name users define (``"inverse"``).
        install: ``install(record, value)``, run once per op class that defines (or inherits) the
            hook, after the op is defined with the dispatcher. ``record`` is the op's
            :class:`~opclass.OpRecord` (``record.op``, ``record.lib``, ``record.hooks``...).
        check: ``check(value, ctx)``, run at class creation before anything is registered; call
            ``ctx.fail(problem, fix)`` to reject the definition.
        kernel: the hook takes the op's arguments: its annotations take part in schema derivation.
        backend: the hook is a backend kernel; defining one makes the class a concrete op.
        device_type: the device type a backend kernel serves (``"cuda"``); ``None`` for all.
        requires: hooks that must be defined together with this one (``backward`` needs
            ``setup_context``).
        staticmethod: the value must be a ``@staticmethod`` (else any class attribute).
        doc: one line for the hooks table.
        uninstall: ``uninstall(record, value)``, run when the op is removed or redefined, for
            installers that put something outside the op's own registrations (a global table
            keyed by ``record.op``): take it out again.
        occupies: ``occupies(value)``: ``(dispatch keys, what a kernel there is, fix)`` for each
            kernel the installer registers. On an op defined elsewhere (``existing=True``) a
            kernel the op already has at one of those keys is never replaced: the class is refused.
        aliases: names people write meaning this hook (``bwd``): a method of that name is
            refused with "did you mean" this hook.
        arguments_from: the hook's function takes the op's arguments from this parameter on
            (``vmap``: 2, after ``info`` and ``in_dims``); class creation checks that each one
            with a schema default has a default there too, as it does for kernels.
        fallback: ``fallback(record)``, run for a class that does not define the hook, after
            every installer ran: what stands in for the hook (``abstract``'s is the fake kernel
            opclass generates).
        members: the hook's value is a dict of named functions rather than one attribute: the
            class's functions marked with ``setattr(fn, MEMBER_OF, name)`` (``opclass.provider``
            marks its functions for the ``providers`` hook), whatever their attribute names,
            and ``extra(qualname)``'s. With ``kernel``, each one is checked as a kernel is.
        extra: ``extra(qualname)``: members given from outside the class, by the op's name.
        conventions: the hook serves every overload a class statement defines (``out=True``,
            ``inplace=``), not only the functional op: a kernel hook's functions are adapted to
            each overload's calling convention (see ``opclass.style``), another value is taken as it is.

    Example:
        >>> import opclass
        >>> INVERSES = {}
        >>> hook = opclass.register_hook(opclass.Hook(
        ...     "docs_inverse", install=lambda record, fn: INVERSES.__setitem__(record.qualname, fn),
        ...     doc="the op's inverse"))
        >>> opclass.unregister_hook("docs_inverse")
    """

    name: str
    install: Callable[["OpRecord", Any], None]
    check: Callable[[Any, HookContext], None] | None = None
    kernel: bool = False
    backend: bool = False
    device_type: str | None = None
    requires: tuple[str, ...] = ()
    staticmethod: bool = True
    doc: str = ""
    uninstall: Callable[["OpRecord", Any], None] | None = None
    occupies: Callable[[Any], Sequence[tuple[Sequence[str], str, str]]] | None = None
    aliases: tuple[str, ...] = ()
    arguments_from: int | None = None
    fallback: Callable[["OpRecord"], None] | None = None
    members: bool = False
    extra: Callable[[str], Mapping[str, Any]] | None = None
    conventions: bool = False


#: The attribute that marks a function as a member of a hook's collection (see ``Hook.members``).
MEMBER_OF = "__opclass_member_of__"
#: Set on a member given from outside its class: the module that gave it (errors name it).
ADDED_BY = "__opclass_added_by__"
#: Set on a member given from outside its class that must never make a class statement fail (a
#: provider loaded when first chosen, added before its op was defined): where it does not fit the
#: class, it is left out, with a warning.
OPTIONAL = "__opclass_optional__"

_HOOKS: dict[str, Hook] = {}
_LOCK = threading.Lock()


def register_hook(hook: Hook) -> Hook:
    """Add ``hook`` so that every ``CustomOp`` subclass defined from now on may define it.

    Registering a name again replaces the earlier hook (re-running a module is safe).

    Example:
        >>> import opclass
        >>> h = opclass.register_hook(opclass.Hook("docs_note", install=lambda record, value: None, staticmethod=False))
        >>> "docs_note" in opclass.hooks()
        True
        >>> opclass.unregister_hook("docs_note")
    """
    if not hook.name.isidentifier() or hook.name.startswith("_"):
        raise ValueError(f"hook name {hook.name!r} must be a public Python identifier")
    with _LOCK:
        _HOOKS[hook.name] = hook
    return hook


def unregister_hook(name: str) -> None:
    """Remove the hook ``name``; classes defined later treat the attribute as a plain helper.

    Example:
        >>> import opclass
        >>> _ = opclass.register_hook(opclass.Hook("docs_tmp", install=lambda r, v: None))
        >>> opclass.unregister_hook("docs_tmp")
        >>> "docs_tmp" in opclass.hooks()
        False
    """
    with _LOCK:
        _HOOKS.pop(name, None)


def hooks() -> Mapping[str, Hook]:
    """The registered hooks by name, in registration (and installation) order.

    Example:
        >>> import opclass
        >>> [name for name in opclass.hooks()][:3]
        ['default', 'cpu', 'cuda']
    """
    with _LOCK:
        return dict(_HOOKS)


def kernels_of(registry: Mapping[str, Hook], defined: Mapping[str, Any]) -> dict[str, Any]:
    """Every kernel a class defines, by the name errors give it: each kernel hook's function, and
    each member of a hook that collects kernels (``Hook.members``)."""
    found: dict[str, Any] = {}
    for name, value in defined.items():
        if registry[name].kernel:
            found.update(value if registry[name].members else {name: value})
    return found


def member_hook(registry: Mapping[str, Hook], fn: Any) -> str | None:
    """The hook ``fn`` is marked a member of (``MEMBER_OF``), where that hook collects members."""
    name = getattr(fn, MEMBER_OF, None)
    return name if isinstance(name, str) and name in registry and registry[name].members else None


def parameters_of(fn: Any) -> list[inspect.Parameter] | None:
    """For hook checks: ``fn``'s parameters, or ``None`` where it has no signature (some builtins)."""
    try:
        return list(memo.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def positional_count(fn: Any) -> int | None:
    """For hook checks: how many positional parameters ``fn`` takes, or ``None`` if it takes ``*args``."""
    params = parameters_of(fn)
    if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
