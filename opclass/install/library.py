"""The op's ``torch.library`` fragment: every registration of one install goes through it.

Built on ``torch.library.Library`` primitives directly rather than ``torch.library.custom_op``:
the same safety checks (output aliasing, version bumps, the missing-formula error), fewer layers.

Example:
    >>> from opclass.install.library import overload
    >>> overload("aten", "add", "Tensor")
    <OpOverload(op='aten.add', overload='Tensor')>
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from opclass.core.compat import register_config
from opclass.core.names import DEFAULT_OVERLOAD
from opclass.core.shield import shield
from opclass.install.plan import Registration

if TYPE_CHECKING:
    from opclass.install.record import OpRecord


class OpLibrary(torch.library.Library):
    """A ``Library`` fragment whose Python kernels let go of the op's objects on :meth:`release`.

    torch keeps the Python kernels of a destroyed op name alive until that name is registered
    again. Released, a removed op's kernels no longer hold its record, the user's functions or
    whatever those hold: opclass's own kernels have their closure cells emptied (no wrapper
    frame on the call path); anything else (the user's functions, torch's wrappers) is
    registered through a one-slot trampoline that is emptied instead.
    """

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
        self._slots: list[list[Any]] = []
        self._ours: list[Callable[..., Any]] = []
        #: Every kernel registered through this fragment, with the hook that was installing.
        self.registrations: list[Registration] = []
        #: The hook whose installer runs now (``None``: opclass's own registrations).
        self.installing: str | None = None
        #: Config classes this install registered with torch (taken back with the op where torch can).
        self.configs: list[type] = []

    def _releasable(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        shield(fn)
        if (getattr(fn, "__module__", None) or "").startswith("opclass.") and getattr(fn, "__closure__", None):
            self._ours.append(fn)
            return fn
        slot = [fn]
        self._slots.append(slot)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            return slot[0](*args, **kwargs)

        return shield(kernel)

    def impl(self, op_name: Any, fn: Any, dispatch_key: str = "", *, with_keyset: bool = False, allow_override: bool = True) -> None:
        if callable(fn):
            name = f"{op_name._schema.name}.{op_name._overloadname}" if isinstance(op_name, torch._ops.OpOverload) else str(op_name)
            name = name.rpartition("::")[2].removesuffix(f".{DEFAULT_OVERLOAD}")
            self.registrations.append(Registration(name, dispatch_key or "CompositeImplicitAutograd", fn, self.installing))
        super().impl(op_name, self._releasable(fn) if callable(fn) else fn, dispatch_key, with_keyset=with_keyset, allow_override=allow_override)  # type: ignore[no-untyped-call]

    def _register_fake(self, op_name: str, fn: Callable[..., Any], _stacklevel: int = 1, *, allow_override: bool = True) -> None:
        super()._register_fake(op_name, self._releasable(fn), _stacklevel=_stacklevel + 1, allow_override=allow_override)  # type: ignore[no-untyped-call]

    def release(self) -> None:
        for slot in self._slots:
            slot[0] = _removed
        for fn in self._ours:
            for cell in fn.__closure__ or ():
                cell.cell_contents = None
        self._slots.clear()
        self._ours.clear()
        self.registrations.clear()


def _removed(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this opclass op was removed")


def open_library(record: OpRecord) -> None:
    """Give the install its fragment, which owns every registration it makes, and its op: defined
    here (its config classes registered with torch first), or (``existing=True``) the op defined
    elsewhere."""
    lib = record.lib = OpLibrary(record.namespace)
    if not record.existing:
        lib.configs = [cls for cls in record.configs.values() if register_config(cls)]
        tags = tuple(record.tags)
        if torch.Tag.pt2_compliant_tag not in tags:
            tags += (torch.Tag.pt2_compliant_tag,)
        lib.define(record.overload_name() + record.schema_str, tags=tags)  # type: ignore[no-untyped-call]
    record.op = overload(record.namespace, record.name, record.overload)


def overload(namespace: str, name: str, overload: str) -> Any:
    """``torch.ops.namespace.name.overload`` (``""``: the overload torch names by its own word)."""
    return getattr(getattr(getattr(torch.ops, namespace), name), overload or DEFAULT_OVERLOAD)
