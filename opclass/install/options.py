"""What a kernel declares beside its function: :class:`Options`, the arguments of
``opclass.provider`` (devices, predicate, availability, flags, tolerances, platform), which
``opclass.provider`` marks the function with (:data:`MARK`) and the kernel table reads.

Example:
    >>> import torch
    >>> from opclass.install.options import Options
    >>> Options(("cpu",), atol={torch.float16: 1e-2}).tolerances(torch.ones(1, dtype=torch.float16))
    (0.01, 0.0)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import torch
from torch.utils._pytree import tree_leaves

from opclass.install import orders
from opclass.install.lazy import Lazy

__all__ = ["MARK", "Options", "options_of"]

#: The attribute ``opclass.provider`` sets on a function: its :class:`Options`.
MARK = "__opclass_provider__"


@dataclasses.dataclass(frozen=True)
class Options:
    """What a kernel declares beside its function (``opclass.provider``'s arguments)."""

    devices: tuple[str, ...] | None
    supports: Callable[..., bool] | None = None
    available: Callable[[], bool] | None = None
    batch_invariant: bool = False
    deterministic: bool = False
    #: One value, or one per dtype (``{torch.float16: 1e-2, torch.float32: 1e-5}``).
    atol: float | Mapping[torch.dtype, float] | None = None
    rtol: float | Mapping[torch.dtype, float] | None = None
    #: The platform it needs within its device type (``"rocm"``: a HIP build's ``cuda``).
    platform: str | None = None
    #: The CUDA compute capabilities it runs on, ``(lowest, highest)``, both included (``None``: open).
    capability: tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None
    #: A provider named by ``"module:attr"`` (``opclass.add_provider`` with a string): loaded when first chosen.
    lazy: Lazy | None = None
    #: Where a provider added from outside its class came from (``""``: the class body, or an own kernel).
    origin: str = ""

    def flags(self) -> frozenset[str]:
        return frozenset(f for f in orders.FLAGS if getattr(self, f))

    def tolerances(self, values: Any = ()) -> tuple[float | None, float | None]:
        """``(atol, rtol)`` for ``torch.testing.assert_close`` of ``values`` (per dtype: that of
        their first floating Tensor): both ``None`` (its defaults), or both set."""
        dtype = next((t.dtype for t in tree_leaves(values) if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        atol, rtol = ((v.get(dtype) if dtype else None) if isinstance(v, Mapping) else v for v in (self.atol, self.rtol))
        return (None, None) if atol is None and rtol is None else (atol or 0.0, rtol or 0.0)


def options_of(fn: Any) -> Options | None:
    """The options ``opclass.provider`` marked ``fn`` with, if any."""
    return getattr(fn, MARK, None)
