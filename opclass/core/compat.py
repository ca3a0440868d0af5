"""What the installed torch provides, where releases differ: found out once, by feature, here.

opclass supports torch 2.11 to 2.15 (docs/getting-started.md lists what each lacks); other
modules ask this one rather than probing ``torch`` or comparing version numbers.

* ``torch.Tag.inplace`` / ``torch.Tag.out`` (2.13+): ``INPLACE_TAG``/``OUT_TAG`` are None before,
  where no user can spell them, so opclass's inplace/out rules never apply there.
* Opaque value types (config objects): 2.12+ takes a plain class; 2.11 wants a private torch
  base class, so config objects start at 2.12 (:func:`plain_opaque_values`). 2.14 renamed them
  custom classes of type ``"constant"`` (the old names log a deprecation) and 2.15 can
  unregister one: :func:`register_config` / :func:`unregister_config` use what torch has.
* DTensor (2.14+) drops strategies that would move an ``out=`` argument itself and raises its own
  error: :func:`dtensor_refused_out` recognises it, so the message names the argument everywhere.

Example:
    >>> from opclass.core import compat
    >>> compat.tagged_inplace(()) or compat.tagged_out(())
    False
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Collection

import torch

INPLACE_TAG: torch.Tag | None = getattr(torch.Tag, "inplace", None)
"""``torch.Tag.inplace`` (mutates and returns its first argument), or None where torch lacks it."""

OUT_TAG: torch.Tag | None = getattr(torch.Tag, "out", None)
"""``torch.Tag.out`` (writes into and returns keyword-only ``out`` Tensors), or None where torch lacks it."""

MUTATION_TAGS: tuple[torch.Tag, ...] = tuple(t for t in (INPLACE_TAG, OUT_TAG) if t is not None)
"""The tags whose aliasing rules opclass enforces, as far as this torch has them."""


def tagged_inplace(tags: Collection[torch.Tag]) -> bool:
    """True if ``tags`` holds ``torch.Tag.inplace`` (never where torch has no such tag).

    Example:
        >>> tagged_inplace((torch.Tag.pt2_compliant_tag,))
        False
    """
    return INPLACE_TAG is not None and INPLACE_TAG in tags


def tagged_out(tags: Collection[torch.Tag]) -> bool:
    """True if ``tags`` holds ``torch.Tag.out`` (never where torch has no such tag).

    Example:
        >>> tagged_out(())
        False
    """
    return OUT_TAG is not None and OUT_TAG in tags


# torch 2.14+: torch.distributed.tensor._ops.utils.expand_to_full_mesh_op_strategy.
_DTENSOR_NO_STRATEGY = "no valid sharding strategy for the input placements"


def dtensor_refused_out(error: BaseException) -> bool:
    """True if ``error`` is DTensor's own "no valid sharding strategy" refusal (torch 2.14+).

    Example:
        >>> dtensor_refused_out(RuntimeError("ns::op.out: no valid sharding strategy for the input placements."))
        True
        >>> dtensor_refused_out(RuntimeError("shape mismatch"))
        False
    """
    return isinstance(error, RuntimeError) and _DTENSOR_NO_STRATEGY in str(error)


def _opaque() -> Any:
    from torch._library import opaque_object  # imported on first use: it pulls in FX

    return opaque_object


def is_config_type(cls: type) -> bool:
    """``cls`` is registered with torch as an opaque constant (value) type."""
    oo = _opaque()
    is_constant = getattr(oo, "is_opaque_constant_type", None) or oo.is_opaque_value_type
    return bool(is_constant(cls))


def register_config(cls: type) -> bool:
    """Register ``cls`` as an opaque constant type (giving it an ``__fx_repr__`` if it has none);
    ``True`` if this call registered it, ``False`` if torch knew it already."""
    if is_config_type(cls):
        return False
    if "__fx_repr__" not in vars(cls):
        cls.__fx_repr__ = _fx_repr  # type: ignore[attr-defined]
    oo = _opaque()
    if hasattr(oo, "register_custom_class"):
        oo.register_custom_class(cls, typ="constant")
    else:
        oo.register_opaque_type(cls, typ="value")
    return True


def unregister_config(cls: type) -> bool:
    """Take back a registration of :func:`register_config` where torch can (2.15+); ``False`` where
    it cannot (the type then stays registered, once)."""
    unregister = getattr(_opaque(), "unregister_custom_class", None)
    if unregister is None or not is_config_type(cls):
        return False
    unregister(cls)
    if vars(cls).get("__fx_repr__") is _fx_repr:
        del cls.__fx_repr__  # type: ignore[attr-defined]
    return True


def _fx_repr(self: Any) -> tuple[str, dict[str, type]]:
    return repr(self), {type(self).__name__: type(self)}


@dataclasses.dataclass(frozen=True)
class _OpaqueProbe:
    """A plain frozen dataclass, registered once to learn whether torch takes such a class: no torch
    base, and what a config class has (``__eq__``, ``__hash__``; :func:`register_config` adds ``__fx_repr__``)."""


def config_stand_in() -> str:
    """A registered opaque type name that parses as a config type does: a schema is parsed (and
    checked) with it in place of a config class's name before that class is registered, at
    install. opclass's own probe class, registered by :func:`plain_opaque_values`."""
    plain_opaque_values()
    return f"{_OpaqueProbe.__module__}.{_OpaqueProbe.__qualname__}"


@functools.cache
def plain_opaque_values() -> bool:
    """True if torch registers a plain class as an opaque value type (torch 2.12+; not 2.11).

    Found out on first use by registering a private probe class (opclass's own), and remembered.

    Example:
        >>> plain_opaque_values() in (True, False)
        True
    """
    try:
        register_config(_OpaqueProbe)
    except (ImportError, TypeError):
        return False
    return True
