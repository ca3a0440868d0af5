"""Debug mode (``OPCLASS_DEBUG=1`` when an op is defined): each of its kernels is wrapped to
compare the version counters of the Tensor arguments the op does not declare in
``mutates_args`` before and after it runs; a kernel that writes to one raises, naming the op,
the hook and the fix. Every call path runs the wrapped kernel; an op defined without the
variable pays nothing. ``opclass.testing`` runs the same comparison, debug mode or not.

Example:
    >>> from opclass.hooks import debug
    >>> debug.ENV
    'OPCLASS_DEBUG'
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, Callable

import torch

from opclass.core.types import tensors_in

if TYPE_CHECKING:
    from opclass.define.spec import OpSpec

ENV = "OPCLASS_DEBUG"


def enabled() -> bool:
    """Whether ops defined now get the debug checks (``OPCLASS_DEBUG`` set, and not ``0``)."""
    return os.environ.get(ENV, "") not in ("", "0")


def _tensors(spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, bool, torch.Tensor]]:
    """``(argument name, declared mutated, Tensor)`` for every Tensor argument (list elements too)."""
    found = []
    for i, a in enumerate(spec.schema.arguments):
        value = kwargs.get(a.name) if a.kwarg_only else args[i] if i < len(args) else kwargs.get(a.name)
        found += [(a.name, a.name in spec.mutated_names, t) for t in tensors_in((value,))]
    return found


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):  # no storage (sparse...): the Tensor itself
        return id(t)


def watched(spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor, int]]:
    """``(argument name, Tensor, version)`` for each Tensor the op does not declare mutated.

    Left out: inference Tensors (no version counter) and Tensors sharing storage with a declared
    one (a view shares its base's counter, which a declared write moves)."""
    tensors = _tensors(spec, args, kwargs)
    written = {_storage(t) for _, declared, t in tensors if declared}
    return [(n, t, t._version) for n, declared, t in tensors if not declared and not t.is_inference() and _storage(t) not in written]


def undeclared_write(where: str, spec: OpSpec, before: list[tuple[str, torch.Tensor, int]]) -> str | None:
    """The error for the first watched Tensor whose version counter moved, or ``None``."""
    for name, t, version in before:
        if t._version != version:
            declared = (*spec.mutated_names, name)
            keyword = f"mutates_args=({', '.join(repr(n) for n in declared)},)" if len(declared) == 1 else f"mutates_args={declared!r}"
            return (
                f"{where} wrote to {name!r} (its version counter moved), but the op does not "
                f"declare that it mutates {name!r}, so torch.compile, autograd and functionalization assume it is unchanged: "
                f"add {keyword} to the class statement (class {spec.cls_name}(CustomOp, ..., {keyword})), "
                f"or write to a copy instead ({name} = {name}.clone() first)"
            )
    return None


def checking_writes(spec: OpSpec, hook: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, raising ``RuntimeError`` when it writes to an argument not in ``mutates_args``."""
    where = f"{spec.qualname} ({spec.cls_name}.{hook})"

    @functools.wraps(fn)
    def debug_kernel(*args: Any, **kwargs: Any) -> Any:
        before = watched(spec, args, kwargs)
        result = fn(*args, **kwargs)
        problem = undeclared_write(where, spec, before)
        if problem is not None:
            raise RuntimeError(problem)
        return result

    return debug_kernel
