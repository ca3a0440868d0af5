"""The schema types, in one table, and the facts about plain eager calls every layer shares.

:data:`SCHEMA_TYPES` has a row per base schema type: how a schema spells it, what
``Argument.real_type`` prints for it, the annotation that gives it, how messages show it, the
exact-type check the call path makes, the Python types a default may have, where it may stand
(in a list, as a return) and the C entry's letter. Annotations, the Python signature, messages,
defaults, guards, the native guard's spec and the output contract read their column of it.
:func:`arg_type` gives the call path's view of any JIT type text; the plain key sets, the devices
the guards classify and the codes they return are shared with ``csrc/guard.cpp``.

Example:
    >>> from opclass.core import types
    >>> types.arg_type("float").entry, types.guard_text("Optional[float]", "x")
    ('f', '(x is None or type(x) is float)')
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterator, NamedTuple

import torch
from torch import _C

_INT = "(type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807)"  # the dispatcher refuses others


@dataclasses.dataclass(frozen=True)
class SchemaType:
    """One base schema type (see the module docstring); ``annotation`` is ``None`` for a type only
    ``opclass.SchemaType`` gives (``int``: a bare ``int`` annotation is ``SymInt``)."""

    schema: str
    jit: str
    annotation: Any
    shown: str
    check: str | None
    defaults: tuple[type, ...] = ()
    listable: bool = False
    returnable: bool = False
    entry: str | None = None


SCHEMA_TYPES: tuple[SchemaType, ...] = (
    SchemaType("Tensor", "Tensor", torch.Tensor, "Tensor", "type({v}) is _T", (), True, True, "T"),
    SchemaType("SymInt", "int", int, "int", _INT, (int,), True, True, "i"),
    SchemaType("int", "int", None, "int", _INT, (int,), True, True, "i"),
    SchemaType("float", "float", float, "float", "type({v}) is float", (float, int), True, True, "f"),
    SchemaType("bool", "bool", bool, "bool", "type({v}) is bool", (bool,), True, True, "b"),
    SchemaType("str", "str", str, "str", "type({v}) is str", (str,), True),
    SchemaType("Scalar", "number", torch.types.Number, "Number", "type({v}) in _number", (int, float, bool), True, True),
    SchemaType("ScalarType", "ScalarType", torch.dtype, "torch.dtype", "type({v}) is _dtype", (torch.dtype,)),
    SchemaType("Device", "Device", torch.device, "torch.device", "type({v}) is _device", (torch.device, str), True),
    SchemaType("Layout", "Layout", torch.layout, "torch.layout", "type({v}) is _layout", (torch.layout,)),
    SchemaType("MemoryFormat", "MemoryFormat", torch.memory_format, "torch.memory_format", "type({v}) is _memory_format", (torch.memory_format,)),
)
#: The rows by schema spelling, by annotation, and by JIT text (``int``: the ``SymInt`` row).
BY_SCHEMA = {t.schema: t for t in SCHEMA_TYPES}
BY_ANNOTATION = {t.annotation: t for t in SCHEMA_TYPES if t.annotation is not None}
BY_JIT = {t.jit: t for t in reversed(SCHEMA_TYPES)}

#: The names the checks use, as closure values for generated code.
CHECK_NAMES: dict[str, Any] = {
    "_T": torch.Tensor,
    "_number": frozenset({int, float, bool}),
    "_dtype": torch.dtype,
    "_device": torch.device,
    "_layout": torch.layout,
    "_memory_format": torch.memory_format,
    "_seq": (list, tuple),
}


@dataclasses.dataclass(frozen=True)
class ArgType:
    """A JIT type as the call path sees it. ``check``: an expression of ``{v}``, true when the value
    has the exact Python type the dispatcher hands a Python kernel; ``tensor``: ``"one"`` or
    ``"list"`` for the Tensor kinds the guards classify; ``letter``: the native guard's spec
    letter; ``entry``: the C entry's letter (``None``: the C entry does not take it)."""

    check: str | None = None
    tensor: str = ""
    letter: str = "X"
    entry: str | None = None


# The Tensor kinds the guards classify.
_TENSOR_KINDS = {
    "Tensor": ArgType("type({v}) is _T", "one", "T", "T"),
    "Optional[Tensor]": ArgType("({v} is None or type({v}) is _T)", "one", "O", "O"),
    "List[Tensor]": ArgType("(type({v}) is list and all(type(_e) is _T for _e in {v}))", "list", "L"),
    "List[Optional[Tensor]]": ArgType(None, "list", "M"),
}
# Return types whose check is known to match the dispatcher's conversion exactly.
_EXACT_RETURNS = ("Tensor", "Optional[Tensor]", "List[Tensor]", "int", "float", "bool")


@functools.cache
def arg_type(jit: str) -> ArgType:
    """The call path's view of the JIT type text ``jit`` (``"Optional[Tensor]"``); a type it does
    not know has no check."""
    row = BY_JIT.get(jit)
    return _TENSOR_KINDS.get(jit) or (ArgType() if row is None else ArgType(row.check, entry=row.entry))


def holds_tensor(jit: str) -> bool:
    """The JIT type is a Tensor type or holds one (an optional Tensor, a list of them)."""
    return "Tensor" in jit


def _inside(jit: str, head: str) -> str | None:
    return jit[len(head) : -1] if jit.startswith(head) and jit.endswith("]") else None


def optional_of(jit: str) -> str | None:
    """The inner type of ``Optional[T]`` (``"T"``); ``None`` for a JIT type that is not optional."""
    return _inside(jit, "Optional[")


def element_of(jit: str) -> str | None:
    """The element type of ``List[T]`` (``"T"``); ``None`` for a JIT type that is not a list
    (``Optional[List[T]]`` is an optional, not a list)."""
    return _inside(jit, "List[")


def items_of(jit: str) -> tuple[str, ...] | None:
    """The item types of ``Tuple[Tensor, List[int]]`` (``["Tensor", "List[int]"]``); ``None`` for
    a JIT type that is not a tuple."""
    text = _inside(jit, "Tuple[")
    return None if text is None else tuple(split_top(text))


def split_top(text: str) -> list[str]:
    """``text`` split at its top-level commas (those inside brackets or parentheses are an item's
    own): ``"Tensor x, int[2] s=[1, 2]"`` -> ``["Tensor x", "int[2] s=[1, 2]"]``."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c in "[(") - (c in "])")
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def inner(jit: str) -> tuple[str, bool, bool]:
    """``(base, optional, list)`` of a JIT type text: ``Optional[List[int]]`` -> ``("int", True, True)``."""
    optional = optional_of(jit)
    element = element_of(optional or jit)
    return element or optional or jit, optional is not None, element is not None


class JitType(NamedTuple):
    """Every fact of one JIT type text at once (:func:`jit_type`): what the functions of the same
    names give (``base``, ``is_list``: :func:`inner`'s; ``kind``: :func:`arg_type`'s)."""

    optional: str | None
    element: str | None
    items: tuple[str, ...] | None
    base: str
    is_list: bool
    holds_tensor: bool
    kind: ArgType


@functools.cache
def jit_type(jit: str) -> JitType:
    """The facts of the JIT type text ``jit``: ``jit_type("Optional[List[int]]").base == "int"``."""
    base, _, listed = inner(jit)
    return JitType(optional_of(jit), element_of(jit), items_of(jit), base, listed, holds_tensor(jit), arg_type(jit))


def guard_text(jit: str, var: str) -> str | None:
    """The type guard for a non-Tensor argument: scalars, their lists (callers may pass tuples),
    their ``Optional`` forms; ``None`` when there is no cheap one."""
    base, optional, listed = inner(jit)
    row = arg_type(base)
    if row.check is None or row.tensor or holds_tensor(base):
        return None
    check = f"type({var}) in _seq and all({row.check.format(v='_e')} for _e in {var})" if listed else row.check.format(v=var)
    return f"({var} is None or {check})" if optional else check


def exact_return(kinds: tuple[str, ...], var: str) -> str | None:
    """An expression true when ``var`` already is what the dispatcher returns for these return
    types; ``None`` when no cheap one exists (then every result is converted)."""
    if not kinds:
        return f"{var} is None"
    checks = [arg_type(k).check if k in _EXACT_RETURNS else None for k in kinds]
    if any(c is None for c in checks):
        return None
    if len(kinds) == 1:
        return checks[0].format(v=var)  # type: ignore[union-attr]
    return " and ".join([f"type({var}) is tuple", f"len({var}) == {len(kinds)}", *(c.format(v=f"{var}[{i}]") for i, c in enumerate(checks))])  # type: ignore[union-attr]


@functools.cache
def exact_predicate(kinds: tuple[str, ...]) -> Callable[[Any], bool]:
    """``is_exact(result)``: :func:`exact_return` for ``out`` as a function, one per return types."""
    is_exact: Callable[[Any], bool] = eval(f"lambda out: {exact_return(kinds, 'out') or 'False'}", {"_T": torch.Tensor})  # noqa: S307
    return is_exact


def returns_of(schema: torch._C.FunctionSchema) -> tuple[str, ...]:
    """The return types of ``schema``, as JIT type texts."""
    return tuple(str(r.real_type) for r in schema.returns)


def same_values(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Same shape, dtype and values, NaN where there was NaN."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    return torch.equal(before, after) or bool(((before == after) | ((before != before) & (after != after))).all())  # NaN stays NaN


def tensors_in(values: Any) -> Iterator[torch.Tensor]:
    """Every Tensor among ``values``, one level of lists and tuples looked into, in order."""
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, torch.Tensor))


#: Device types torch knows (a class method named after one, with no hook, is a mistake).
DEVICE_TYPES = frozenset({"cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "hpu", "mtia", "privateuseone"})
#: Device names torch does not know, and the device type meant.
MISTAKEN_DEVICES = {"gpu": "cuda", "tpu": "xla", "npu": "privateuseone", "metal": "mps", "rocm": "cuda", "hpu_": "hpu"}


# --------------------------------------------------------------------------- plain eager calls

#: Device types the guards classify, with their backend dispatch keys.
FAST_DEVICES = {"cpu": "CPU", "cuda": "CUDA"}
#: The guards' answer for a plain call, a bit each: its device, whether grad may be needed, and
#: whether the version counters of mutated Tensors are bumped (ADInplaceOrView not excluded).
CPU, CUDA, GRAD, BUMP = 1, 2, 4, 8
DEVICE_CODES = {"cpu": CPU, "cuda": CUDA}


@functools.cache
def plain_keysets(device: str) -> tuple[Any, Any]:
    """The key sets of a plain dense Tensor on ``device`` (``"cpu"``/``"cuda"``): a normal one and
    an inference one. ``csrc/guard.cpp`` holds the same sets (``tests/test_guard.py`` compares)."""
    keys = _C.DispatchKey
    backend = getattr(keys, FAST_DEVICES[device])
    inference = _C.DispatchKeySet(backend).add(getattr(keys, "Autocast" + backend.name))
    return inference.add(keys.ADInplaceOrView).add(getattr(keys, "Autograd" + backend.name)), inference


@functools.cache
def autograd_keysets(device: str) -> tuple[int, int]:
    """Raw key sets the Autograd kernel sees for a plain Tensor on ``device`` (autocast excluded,
    as it is by default), with and without ``ADInplaceOrView``."""
    normal = plain_keysets(device)[0].remove(getattr(_C.DispatchKey, "Autocast" + FAST_DEVICES[device]))
    return normal.remove(_C.DispatchKey.ADInplaceOrView).raw_repr(), normal.raw_repr()
