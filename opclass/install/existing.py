"""Extending an op defined elsewhere (``existing=True``): a ``TORCH_LIBRARY`` op from C++, or a
``Library("ns", "DEF")`` op from Python.

The install is a ``Library(ns, "FRAGMENT")`` holding only the class's own registrations, so
removing the class takes away exactly what it added. As ``torch.library.register_fake`` and
its kin do, the class adds a kernel only where the op has none (``Hook.occupies`` says where):
one the op already has is refused at class creation, never replaced. Of opclass's own kernels
only Autograd is added (with a formula); the op's device kernels are left to the dispatcher.

Example:
    >>> from opclass.install.existing import has_fake
    >>> has_fake("aten::add.Tensor")
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import torch
from torch import _C

if TYPE_CHECKING:
    from opclass.define.hookspec import Hook
    from opclass.install.record import OpRecord

__all__ = ["conflicts", "has_fake", "FAKE"]

#: The key a hook's ``occupies`` names for "the op's fake kernel" (a registered one, or a kernel at a key serving FakeTensor).
FAKE = "Fake"


def _kernel_at(qualname: str, key: str, own: set[str]) -> str | None:
    """Where the op's kernel at ``key`` was registered (``None``: none, or the class's own)."""
    if key == FAKE:
        kernel = None if "Meta" in own else torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel
        return f"a fake kernel registered at {kernel.source}" if kernel is not None else None
    if key in own or not _C._dispatch_has_kernel_for_dispatch_key(qualname, key):
        return None
    for line in _C._dispatch_dump(qualname).splitlines():
        head, _, rest = line.partition(": ")
        if head.split("[")[0] == key:
            return f"{key}: {rest.split(' :: ')[0]}"
    return key


def has_fake(qualname: str) -> bool:
    """The op runs under FakeTensor already (a fake/Meta kernel, or a composite one that serves Meta)."""
    return any(_kernel_at(qualname, k, set()) for k in fake_keys())


def conflicts(qualname: str, defined: Mapping[str, Any], hooks: Mapping[str, Hook], live: OpRecord | None) -> list[tuple[str, str, str]]:
    """``(hook, what the op already has, fix)`` for each hook that would replace a kernel of the op;
    not for the keys the class's earlier install (``live``) registered: a redefinition replaces those."""
    own = {r.key for r in live.lib.registrations} if live is not None and live.existing and live.lib is not None else set()
    found: list[tuple[str, str, str]] = []
    for name, value in defined.items():
        occupies = hooks[name].occupies
        for keys, what, fix in occupies(value) if occupies is not None else ():
            where = next((w for w in (_kernel_at(qualname, k, own) for k in keys) if w), None)
            if where is not None:
                if qualname in getattr(torch._library.custom_ops, "OPDEFS", {}) and any(k.startswith("Autograd") for k in keys):
                    # custom_op's Autograd kernel is a stand-in that reads the formula given to
                    # register_autograd: dropping the formula leaves the op without one.
                    fix = (
                        f"{qualname} was made with torch.library.custom_op, whose autograd kernel takes its formula only from "
                        f"torch.library.register_autograd('{qualname}', backward, setup_context=...): give it there, "
                        "and leave the formula out of this class"
                    )
                found.append((name, f"{qualname} already has {what} ({where})", fix))
    return found


def fake_keys() -> tuple[str, ...]:
    """The keys that mean "the op has a fake kernel", for a fake-kernel hook's ``occupies``."""
    return (FAKE, "Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
