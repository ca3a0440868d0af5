"""What the installed torch provides, where releases differ: found out once, by feature, here.

opclass supports torch 2.11 to 2.15 (docs/getting-started.md lists what each lacks); other
modules ask this one rather than probing ``torch`` or comparing version numbers.

* ``torch.Tag.inplace`` / ``torch.Tag.out`` (2.13+): ``INPLACE_TAG``/``OUT_TAG`` are None before,
  where no user can spell them, so opclass's inplace/out rules never apply there.
* Opaque value types (config objects): 2.12+ takes a plain class; 2.11 wants a private torch
  base class, so config objects start at 2.12 (:func:`plain_opaque_values`).
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
from typing import Collection

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


@dataclasses.dataclass(frozen=True)
class _OpaqueProbe:
    """A plain frozen dataclass, registered once to learn whether torch takes such a class: it has
    what opclass gives a config class (``__eq__``, ``__hash__``, ``__fx_repr__``), no torch base."""

    def __fx_repr__(self) -> tuple[str, dict[str, type]]:
        return "_OpaqueProbe()", {"_OpaqueProbe": _OpaqueProbe}


@functools.cache
def plain_opaque_values() -> bool:
    """True if torch registers a plain class as an opaque value type (torch 2.12+; not 2.11).

    Found out on first use by registering a private probe class, and remembered.

    Example:
        >>> plain_opaque_values() in (True, False)
        True
    """
    try:
        from torch._library import opaque_object

        opaque_object.register_opaque_type(_OpaqueProbe, typ="value")
    except (ImportError, TypeError):
        return False
    return True
