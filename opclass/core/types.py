"""What the call path knows about each schema type, in one table, and the codes the guards return.

The plan, the source emitter, the native guard's spec, the C entry and the output contract each
read their column of :data:`ARG_TYPES`; the codes are shared with ``csrc/guard.cpp``.

Example:
    >>> from opclass.core import types
    >>> types.ARG_TYPES["float"].entry, types.guard_text("Optional[float]", "x")
    ('f', '(x is None or type(x) is float)')
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch

#: Device types the guards classify, with their backend dispatch keys.
FAST_DEVICES = {"cpu": "CPU", "cuda": "CUDA"}
#: The guards' answer for a plain call, a bit each: its device, whether grad may be needed, and
#: whether the version counters of mutated Tensors are bumped (ADInplaceOrView not excluded).
CPU, CUDA, GRAD, BUMP = 1, 2, 4, 8
DEVICE_CODES = {"cpu": CPU, "cuda": CUDA}


@dataclasses.dataclass(frozen=True)
class ArgType:
    """One schema type (``Argument.real_type`` as text) as the call path sees it.

    ``check``: an expression of ``{v}``, true when the value has the exact Python type the
    dispatcher hands a Python kernel (for a return: what it would return); ``tensor``: ``"one"``
    or ``"list"`` for Tensor types, which the guards classify; ``letter``: the native guard's
    spec letter; ``entry``: the C entry's letter (``None``: the C entry does not take it).
    """

    check: str | None = None
    tensor: str = ""
    letter: str = "X"
    entry: str | None = None


_INT = "(type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807)"  # the dispatcher refuses others
ARG_TYPES: dict[str, ArgType] = {
    "Tensor": ArgType("type({v}) is _T", "one", "T", "T"),
    "Optional[Tensor]": ArgType("({v} is None or type({v}) is _T)", "one", "O", "O"),
    "List[Tensor]": ArgType("(type({v}) is list and all(type(_e) is _T for _e in {v}))", "list", "L"),
    "List[Optional[Tensor]]": ArgType(None, "list", "M"),
    "int": ArgType(_INT, entry="i"),
    "float": ArgType("type({v}) is float", entry="f"),
    "bool": ArgType("type({v}) is bool", entry="b"),
    "str": ArgType("type({v}) is str"),
    "number": ArgType("type({v}) in _number"),
    "ScalarType": ArgType("type({v}) is _dtype"),
    "Device": ArgType("type({v}) is _device"),
    "Layout": ArgType("type({v}) is _layout"),
    "MemoryFormat": ArgType("type({v}) is _memory_format"),
}
_NONE = ArgType()
# Return types whose check is known to match the dispatcher's conversion exactly.
_EXACT_RETURNS = ("Tensor", "Optional[Tensor]", "List[Tensor]", "int", "float", "bool")

#: The names :data:`ARG_TYPES`' expressions use, as closure values for generated code.
CHECK_NAMES: dict[str, Any] = {
    "_T": torch.Tensor,
    "_number": frozenset({int, float, bool}),
    "_dtype": torch.dtype,
    "_device": torch.device,
    "_layout": torch.layout,
    "_memory_format": torch.memory_format,
    "_seq": (list, tuple),
}


def arg_type(jit: str) -> ArgType:
    """The row of ``jit`` (``"Optional[Tensor]"``); a type the call path does not know has no check."""
    return ARG_TYPES.get(jit, _NONE)


def guard_text(jit: str, var: str) -> str | None:
    """The type guard for a non-Tensor argument: scalars, their lists (callers may pass tuples),
    their ``Optional`` forms; ``None`` when there is no cheap one."""
    optional = jit.startswith("Optional[")
    inner = jit[len("Optional[") : -1] if optional else jit
    row = ARG_TYPES.get(inner)
    if row is not None and row.check is not None and not row.tensor:
        check = row.check.format(v=var)
    elif inner.startswith("List[") and (elem := ARG_TYPES.get(inner[len("List[") : -1])) is not None and elem.check and not elem.tensor:
        check = f"type({var}) in _seq and all({elem.check.format(v='_e')} for _e in {var})"
    else:
        return None
    return f"({var} is None or {check})" if optional else check


def exact_return(kinds: tuple[str, ...], var: str) -> str | None:
    """An expression true when ``var`` already is what the dispatcher returns for these return
    types; ``None`` when no cheap one exists (then every result is converted)."""
    if not kinds:
        return f"{var} is None"
    checks = [ARG_TYPES[k].check if k in _EXACT_RETURNS else None for k in kinds]
    if any(c is None for c in checks):
        return None
    if len(kinds) == 1:
        return checks[0].format(v=var)  # type: ignore[union-attr]
    return " and ".join([f"type({var}) is tuple", f"len({var}) == {len(kinds)}", *(c.format(v=f"{var}[{i}]") for i, c in enumerate(checks))])  # type: ignore[union-attr]


def returns_of(schema: torch._C.FunctionSchema) -> tuple[str, ...]:
    """The return types of ``schema``, as the table's keys."""
    return tuple(str(r.real_type) for r in schema.returns)


def tensors_in(values: Any) -> Iterator[torch.Tensor]:
    """Every Tensor among ``values``, one level of lists and tuples looked into, in order."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))
