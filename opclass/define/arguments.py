"""The op's arguments, each once: the table every emitter, binder, guard, hook check and the C entry
read. :class:`Arguments` binds a call's values to its :class:`Argument` s and writes them as Python text.

Example:
    >>> import torch
    >>> from opclass.define.arguments import Arguments
    >>> table = Arguments.of(torch._C.parse_schema("ns::f(Tensor(a!) x, float k=2.0, *, Tensor? out=None) -> ()"))
    >>> [a.name for a in table.written], table.parameters(), table.call()
    (['x'], '(x, k=2.0, *, out=None)', 'x, k, out=out')
    >>> table.values((torch.ones(1),), {"k": 3.0})[1:]
    [3.0, None]
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from opclass.core.types import ArgType, jit_type, tensors_in

__all__ = ["Argument", "Arguments", "EMPTY", "written_returns"]

#: The default of an argument that has none.
EMPTY: Any = inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument of the op; the last fields follow from the others."""

    index: int
    name: str
    keyword_only: bool
    #: ``Argument.real_type`` as text (``"Optional[List[int]]"``).
    jit: str
    #: The default as kernels get it (a dtype, not the schema's code; a tuple for a list), or :data:`EMPTY`.
    default: Any
    #: The default as the parsed schema holds it (what a hint quotes), or :data:`EMPTY`.
    schema_default: Any
    #: The op writes to it (``Tensor(a!)``).
    written: bool
    #: The config dataclass annotating it (an opaque value type), if any.
    config: type | None = None
    #: Its schema type is ``int`` (``opclass.Int``), which torch specializes, not ``SymInt``
    #: (the two read alike as ``real_type``).
    plain_int: bool = False
    has_default: bool = dataclasses.field(init=False)
    #: Its row for the call path (check, Tensor kind, guard letters).
    kind: ArgType = dataclasses.field(init=False)
    #: A Tensor, an optional Tensor or a list of them.
    holds_tensor: bool = dataclasses.field(init=False)
    #: A list type, optional or not (callers may pass a tuple).
    is_list: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        facts = jit_type(self.jit)
        # ``Tensor x=None`` (torch's form of ``x: Tensor = None``): the call path takes it as optional.
        if self.default is None and facts.optional is None:
            facts = jit_type(f"Optional[{self.jit}]")
        for name, value in (("has_default", self.default is not EMPTY), ("kind", facts.kind), ("holds_tensor", facts.holds_tensor), ("is_list", facts.is_list)):
            object.__setattr__(self, name, value)

    @property
    def is_device(self) -> bool:
        """A ``torch.device`` (JIT type ``Device``), which picks the device kernel of an op with no Tensor inputs."""
        return self.jit == "Device"


class Arguments(tuple):  # type: ignore[type-arg]
    """The op's :class:`Argument` s in schema order (positional first, then keyword-only)."""

    positional: tuple[Argument, ...]
    keyword_only: tuple[Argument, ...]
    written: tuple[Argument, ...]
    names: list[str]
    underscored: bool

    def __new__(cls, arguments: Sequence[Argument]) -> Arguments:
        table = super().__new__(cls, arguments)
        table.positional = tuple(a for a in table if not a.keyword_only)
        table.keyword_only = tuple(a for a in table if a.keyword_only)
        table.written = tuple(a for a in table if a.written)
        table.names = [a.name for a in table]
        # Generated call code names its own values _op, _g...: a parameter could shadow one.
        table.underscored = any(n.startswith("_") for n in table.names)
        return table

    @classmethod
    def of(cls, schema: torch._C.FunctionSchema, configs: Mapping[str, type] | None = None) -> Arguments:
        """The table of ``schema``'s arguments; ``configs``: parameter name -> config class."""
        plain_ints = set(re.findall(r"(?<![\w\[])int\?? (\w+)", str(schema).partition(") ->")[0]))
        return cls(
            [
                Argument(
                    i, a.name, a.kwarg_only, str(a.real_type),
                    _python_default(a) if a.has_default_value() else EMPTY,
                    a.default_value if a.has_default_value() else EMPTY,
                    a.alias_info is not None and a.alias_info.is_write,
                    (configs or {}).get(a.name),
                    a.name in plain_ints,
                )
                for i, a in enumerate(schema.arguments)
            ]
        )

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return next(a for a in self if a.name == key)
        return super().__getitem__(key)

    # ------------------------------------------------------------------ binding a call

    def values(self, args: Sequence[Any], kwargs: Mapping[str, Any], missing: Any = None) -> list[Any]:
        """Each argument's value in the call ``(*args, **kwargs)``, in schema order: a positional
        argument by position, else by name; ``missing`` for one the call leaves out."""
        n = len(args)
        return [args[a.index] if a.index < n and not a.keyword_only else kwargs.get(a.name, missing) for a in self]

    def complete(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call with every argument: the positional ones (a left-out one: its default) and
        the keyword-only ones by name, as the dispatcher drops those equal to their default."""
        positional = (*args, *(kwargs.get(a.name, a.default) for a in self.positional[len(args) :]))
        return positional, {a.name: kwargs.get(a.name, a.default) for a in self.keyword_only}

    def tensors(self, args: Sequence[Any], kwargs: Mapping[str, Any], which: Sequence[Argument] | None = None) -> Iterator[torch.Tensor]:
        """Every Tensor the call passes (list elements too), in schema order; ``which``: only those
        arguments' (``table.written``)."""
        values = self.values(args, kwargs)
        return tensors_in(values[a.index] for a in (self if which is None else which))

    def device_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The device type a call runs on (``None``: it does not say): its first Tensor's, else its
        ``torch.device`` argument's, as the dispatcher picks the kernel."""
        values = self.values(args, kwargs)
        if (first := next(tensors_in(values), None)) is not None:
            return first.device.type
        return next((torch.device(v).type for a, v in zip(self, values) if a.is_device and v is not None), None)

    # ------------------------------------------------------------------ Python text

    def parameters(self, leading: Sequence[str] = (), default: Callable[[Argument], str] | None = None, defaults: bool = True) -> str:
        """``(x, k=2.0, *, out)``: a parameter list taking the op's arguments after ``leading``;
        ``default(a)`` writes a default (the schema's value unless given; none if not ``defaults``)."""
        parts = [a.name + (f"={default(a) if default is not None else repr(a.schema_default)}" if defaults and a.has_default else "") for a in self]
        if self.keyword_only:
            parts.insert(len(self.positional), "*")
        return "(" + ", ".join([*leading, *parts]) + ")"

    def call(self) -> str:
        """``x, k, out=out``: the arguments passed on, positional ones by position."""
        return ", ".join([a.name for a in self.positional] + [f"{a.name}={a.name}" for a in self.keyword_only])

    def args_text(self) -> str:
        """``(x, k, )``: the positional arguments as a tuple."""
        return "(" + "".join(f"{a.name}, " for a in self.positional) + ")"

    def kwargs_text(self) -> str:
        """``{'out': out}``: the keyword-only arguments as a dict."""
        return "{" + ", ".join(f"{a.name!r}: {a.name}" for a in self.keyword_only) + "}"


def _python_default(arg: torch._C.Argument) -> Any:
    """The default the kernels get: the parser keeps ScalarType, Layout and MemoryFormat as codes."""
    value = arg.default_value
    if isinstance(value, int) and not isinstance(value, bool):
        base = jit_type(str(arg.real_type)).base
        return _dtype_from_code(value) if base == "ScalarType" else {"Layout": torch.strided, "MemoryFormat": torch.contiguous_format}.get(base, value)
    return tuple(value) if isinstance(value, list) else value


_DTYPE_CODES: dict[int, torch.dtype] = {}


def _dtype_from_code(code: int) -> Any:
    """The dtype the schema parser stores as ``code``."""
    if not _DTYPE_CODES:
        for d in {d for d in vars(torch).values() if isinstance(d, torch.dtype)}:
            with contextlib.suppress(RuntimeError):  # a dtype the schema language does not spell
                arg = torch._C.parse_schema(f"x::f(ScalarType d={str(d).removeprefix('torch.')}) -> ()").arguments[0]
                if isinstance(arg.default_value, int):
                    _DTYPE_CODES[arg.default_value] = d
    return _DTYPE_CODES.get(code, code)


def written_returns(schema: torch._C.FunctionSchema) -> tuple[tuple[int, str], ...]:
    """``(index, name)`` of the written argument each return is (``-> (Tensor(a!), Tensor(b!))``:
    an in-place or ``out=`` op), where every return is one; else ``()``."""
    found = []
    for r in schema.returns:
        alias = r.alias_info
        arg = next((a for a in schema.arguments if alias is not None and alias.is_write and a.alias_info is not None and a.alias_info.before_set == alias.before_set), None)
        if arg is None:
            return ()
        found.append((list(schema.arguments).index(arg), arg.name))
    return tuple(found)
