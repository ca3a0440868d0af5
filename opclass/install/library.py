"""The op's ``torch.library`` fragment: every registration of one install goes through it.

Built on ``torch.library.Library`` primitives directly rather than ``torch.library.custom_op``:
the same safety checks (output aliasing, version bumps, the missing-formula error), fewer layers.

Example:
    >>> from opclass.install.library import overload
    >>> overload("aten", "add", "Tensor")
    <OpOverload(op='aten.add', overload='Tensor')>
"""

from __future__ import annotations

import collections
import functools
from typing import TYPE_CHECKING, Any, Callable

import torch

from opclass.core.compat import register_config
from opclass.core.names import DEFAULT_OVERLOAD
from opclass.core.shield import shield
from opclass.install.plan import Registration

if TYPE_CHECKING:
    from opclass.install.record import OpRecord


# Points a slot (a functools.partial) at another function: state (function, args, keywords, dict).
_RETARGET: Callable[[Any, Any], None] = functools.partial.__setstate__  # type: ignore[attr-defined]


class OpLibrary(torch.library.Library):
    """A ``Library`` fragment whose Python kernels can be pointed elsewhere without touching the
    dispatcher: each is registered as a ``functools.partial`` slot (a C-level indirection, no
    Python frame on the call path), listed in :attr:`entries` with what it is. Two uses:

    * :meth:`release`: torch keeps a destroyed op's kernels alive until its name is registered
      again; released, they hold nothing of the op (a call raises that it was removed).
    * :meth:`take_over`: torch's dispatcher is not safe to write while other threads call the op,
      so a redefinition that registers exactly what the live install did installs into a *shadow*
      fragment (``onto=`` the live one; it registers nothing with torch), then points the live
      fragment's slots at its functions, all at once.
    """

    def __init__(self, namespace: str, onto: OpLibrary | None = None) -> None:
        super().__init__(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
        self._onto = onto
        #: Registrations are only listed, for :meth:`take_over`.
        self.shadow = onto is not None
        #: (what, slot) for every registration; in a shadow, (what, function): nothing is registered.
        self.entries: list[tuple[tuple[Any, ...], Any]] = []
        self._inside = 0  # torch registering through this fragment on its own (register_fake's Meta kernel)
        #: Every kernel registered through this fragment, with the hook that was installing.
        self.registrations: list[Registration] = []
        #: The hook whose installer runs now (``None``: opclass's own registrations).
        self.installing: str | None = None
        #: Config classes this install registered with torch (taken back with the op where torch can).
        self.configs: list[type] = []

    def _slot(self, what: tuple[Any, ...], fn: Callable[..., Any]) -> Any:
        shield(fn)
        slot = fn if self.shadow else functools.partial(fn)
        self.entries.append((what, slot))
        return slot

    def define(self, schema: str, alias_analysis: str = "", *, tags: Any = ()) -> Any:
        self.entries.append((("define", schema, tuple(tags)), None))
        if self.shadow:
            return schema.partition("(")[0]
        return super().define(schema, alias_analysis, tags=tags)  # type: ignore[no-untyped-call]

    def impl(self, op_name: Any, fn: Any, dispatch_key: str = "", *, with_keyset: bool = False, allow_override: bool = True) -> None:
        name = f"{op_name._schema.name}.{op_name._overloadname}" if isinstance(op_name, torch._ops.OpOverload) else str(op_name)
        name = name.rpartition("::")[2].removesuffix(f".{DEFAULT_OVERLOAD}")
        key = dispatch_key or "CompositeImplicitAutograd"
        if callable(fn):
            self.registrations.append(Registration(name, key, fn, self.installing))
            if not self._inside:
                fn = self._slot(("impl", name, key, with_keyset), fn)
        if not self.shadow:
            super().impl(op_name, fn, dispatch_key, with_keyset=with_keyset, allow_override=allow_override)  # type: ignore[no-untyped-call]

    def _register_fake(self, op_name: str, fn: Callable[..., Any], _stacklevel: int = 1, *, allow_override: bool = True) -> None:
        slot = self._slot(("fake", op_name), fn)
        if not self.shadow:
            self._inside += 1
            try:
                super()._register_fake(op_name, slot, _stacklevel=_stacklevel + 1, allow_override=allow_override)  # type: ignore[no-untyped-call]
            finally:
                self._inside -= 1

    def _register_torch_dispatch_rule(self, op_name: str, torch_dispatch_class: Any, fn: Callable[..., Any]) -> None:
        slot = self._slot(("rule", op_name, torch_dispatch_class), fn)
        if not self.shadow:
            super()._register_torch_dispatch_rule(op_name, torch_dispatch_class, slot)  # type: ignore[no-untyped-call]

    def take_over(self) -> OpLibrary | None:
        """A shadow's end: if it listed exactly what the fragment it shadows registered, point that fragment's
        slots at this one's functions and return it (holding this install's registrations); else ``None``."""
        onto = self._onto
        assert onto is not None
        if [what for what, _ in self.entries] != [what for what, _ in onto.entries]:
            return None
        slots = [slot for _, slot in onto.entries if slot is not None]
        before = [slot.func for slot in slots]  # alive until every slot is switched: no finalizer runs between
        states = [(fn, (), None, None) for _, fn in self.entries if fn is not None]
        # C calls only, no bytecode between them: no other thread runs while the slots switch.
        collections.deque(map(_RETARGET, slots, states), maxlen=0)
        del before
        onto.registrations, onto.installing = self.registrations, None
        self.entries.clear()
        return onto

    def release(self) -> None:
        for what, slot in self.entries:
            if slot is not None and not self.shadow:
                slot.__setstate__((functools.partial(_removed, f"{self.ns}::{what[1]}"), (), None, None))
        self.entries.clear()
        self.registrations.clear()


def _removed(qualname: str, *args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"{qualname} was removed while this call of it was on its way")


def open_library(record: OpRecord, onto: OpLibrary | None = None) -> None:
    """Give the install its fragment, which owns its every registration, and its op: defined here
    (its config classes registered with torch first), or (``existing=True``) elsewhere. With
    ``onto`` (the live install's fragment, whose config classes it shares), a shadow fragment."""
    lib = record.lib = OpLibrary(record.namespace, onto)
    if onto is not None:
        lib.configs = onto.configs
    elif not record.existing:
        lib.configs = [cls for cls in record.configs.values() if register_config(cls)]
    if not record.existing:
        lib.define(record.overload_name() + record.schema_str, tags=record.defined_tags)
    record.op = overload(record.namespace, record.name, record.overload)


def overload(namespace: str, name: str, overload: str) -> Any:
    """``torch.ops.namespace.name.overload`` (``""``: the overload torch names by its own word)."""
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or DEFAULT_OVERLOAD)
