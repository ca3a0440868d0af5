"""What a class statement defines, once validated: the frozen :class:`OpSpec`, and its keywords.

Example:
    >>> from opclass.define.spec import Keywords
    >>> Keywords("ns::op", None, (), None, ()).existing
    False
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch

from opclass.define.arguments import Arguments
from opclass.define.conventions import Convention
from opclass.define.hookspec import Hook

__all__ = ["Keywords", "OpSpec"]


@dataclasses.dataclass(frozen=True)
class Keywords:
    """The class keywords in force, after inheritance and validation."""

    name: str | None
    namespace: str | None
    mutates_args: tuple[str, ...]
    schema: str | None
    tags: tuple[torch.Tag, ...]
    #: ``mutates_args="unknown"``: every Tensor argument is marked mutated, as torch does.
    mutates_unknown: bool = False
    #: ``existing=True``: extend an op defined elsewhere instead of defining one.
    existing: bool = False
    #: ``mutates_args=`` was given (not merely inherited as empty).
    mutates_given: bool = False
    #: ``pt2_compliant=False``: the op is defined with ``tags`` alone.
    pt2_compliant: bool = True
    #: ``out=True``: the op has an ``.out`` overload too.
    out: bool = False
    #: ``inplace=(...)``: the op has an ``.inplace`` overload writing these arguments.
    inplace: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class OpSpec:
    """What an op class defines: its name, schema, arguments, tags and hooks. Frozen: installs only read it."""

    #: ``"ns::name"`` or ``"ns::name.overload"``.
    qualname: str
    #: The op's namespace, the ``ns`` of ``torch.ops.ns.name``.
    namespace: str
    #: The op's name within its namespace, without the overload.
    name: str
    #: The overload name (``""`` for the default overload).
    overload: str
    #: The schema without the name, e.g. ``"(Tensor x) -> Tensor"``.
    schema_str: str
    #: The parsed schema.
    schema: torch._C.FunctionSchema
    #: The op's arguments, each once (:mod:`opclass.define.arguments`).
    arguments: Arguments
    #: The op's Python signature (``inspect.signature(MyOp)``).
    signature: inspect.Signature
    #: The ``torch.Tag`` values of the class's ``tags=`` keyword.
    tags: tuple[torch.Tag, ...]
    #: The tags the op is defined with (``tags``, and ``pt2_compliant_tag`` unless opted out);
    #: with ``existing=True``, the op's own.
    defined_tags: tuple[torch.Tag, ...]
    #: Each defined hook's raw value by hook name; an extension finds its own as ``record.hooks["inverse"]``.
    hooks: dict[str, Any]
    #: The hook registry as the class was validated with it, in registry (installation) order:
    #: installs run these hooks, and no others, whatever the registry holds by then.
    registry: tuple[Hook, ...]
    #: The defining class's ``__name__``, as error messages name it.
    cls_name: str
    #: ``existing=True``: the class extends an op defined elsewhere (its install defines nothing).
    existing: bool = False
    #: Tagged ``Tag.inplace``: the op mutates and returns its first argument.
    is_inplace: bool = False
    #: Tagged ``Tag.out``: the op writes into keyword-only ``out`` Tensors and returns them.
    is_out: bool = False
    #: The calling convention this overload serves (:mod:`opclass.define.conventions`).
    convention: Convention = Convention()
    #: The other overloads the class statement defines (``out=True``, ``inplace=``), each a spec of its own.
    siblings: tuple[OpSpec, ...] = ()

    #: Positions (in schema order) of the arguments the op writes to.
    mutated: tuple[int, ...] = dataclasses.field(init=False)
    #: Names of the arguments the op writes to, in schema order.
    mutated_names: tuple[str, ...] = dataclasses.field(init=False)
    #: Parameter name -> config dataclass (an opaque value type torch must know).
    configs: dict[str, type] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        written, configs = self.arguments.written, {a.name: a.config for a in self.arguments if a.config is not None}
        for name, value in (("mutated", tuple(a.index for a in written)), ("mutated_names", tuple(a.name for a in written)), ("configs", configs)):
            object.__setattr__(self, name, value)

    @property
    def is_functional(self) -> bool:
        """The op mutates nothing (so its outputs must not alias its inputs)."""
        return not self.mutated

    def overload_name(self) -> str:
        """``name`` or ``name.overload``, as ``Library.define`` wants it."""
        return f"{self.name}.{self.overload}" if self.overload else self.name

    def where(self, hook: str) -> str:
        """How errors name a hook of this op: ``"ns::op (Cls.cpu)"``."""
        return f"{self.qualname} ({self.cls_name}.{hook})"
