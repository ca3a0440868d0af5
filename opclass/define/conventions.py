"""Calling conventions: one class statement offers its op functional, with ``out=`` and in place,
and each kernel is written in any of the three styles (:func:`style`).

What is declared, and checked at class creation: the class keywords ``out=True`` (an ``.out``
overload: the functional arguments, then keyword-only ``Tensor(a!) out`` per output, returning
them) and ``inplace=("x", ...)`` (an in-place op ``ns::name_``, named as torch names its own,
``add_``, that writes its results into those arguments and returns them), the overloads' schemas (derived here from the functional one), and
each kernel's style. The install layer adapts each kernel to each overload
(:mod:`opclass.install.conventions`).

Example:
    >>> import torch
    >>> from opclass.define.conventions import out_schema, inplace_schema
    >>> s = torch._C.parse_schema("ns::f(Tensor x, Tensor r, float eps) -> (Tensor, Tensor)")
    >>> out_schema(s)
    '(Tensor x, Tensor r, float eps, *, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))'
    >>> inplace_schema(s, ("x", "r"))
    '(Tensor(a!) x, Tensor(b!) r, float eps) -> (Tensor(a!), Tensor(b!))'
"""

from __future__ import annotations

import dataclasses
import string
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

import torch

from opclass.core.compat import INPLACE_TAG, OUT_TAG, tagged_inplace
from opclass.core.types import returns_of, split_top
from opclass.define.arguments import Arguments
from opclass.define.schema import python_signature

if TYPE_CHECKING:
    from opclass.define.spec import OpSpec

__all__ = ["STYLE", "STYLES", "DERIVED", "Convention", "style", "style_of", "out_names", "out_schema", "inplace_schema", "problem", "forms", "named", "with_siblings", "inductor_trap"]

#: The attribute :func:`style` sets on a kernel.
STYLE = "__opclass_style__"
#: The most arguments an op's schema may have (torch's dispatcher).
MAX_ARGUMENTS = 64
#: Set on the class that calls one of an op's other overloads (``MyOp.out``, ``MyOp.inplace``).
DERIVED = "_opclass_derived"
#: The styles a kernel may be written in: returns its results; writes them into keyword-only
#: ``out`` arguments (one per output: ``out``, or ``out0``, ``out1``...); writes them into the
#: arguments the class's ``inplace=`` names (its return is ignored).
STYLES = ("functional", "out", "inplace")

F = TypeVar("F", bound=Callable[..., Any])


def style(kind: str) -> Callable[[F], F]:
    """Declare the style a kernel is written in (``"functional"``, the default; ``"out"``; ``"inplace"``);
    opclass adapts it to each overload of the op, copying nothing where the styles match.

    An ``"out"`` kernel takes the op's arguments and then, keyword-only, one output buffer per
    output (``out``, or ``out0``, ``out1``...), as vLLM's C++ kernels do; the functional overload
    allocates them with the op's ``abstract``. An ``"inplace"`` kernel writes its results into the
    arguments ``inplace=`` names.

    Example:
        >>> import torch, opclass
        >>> class DocsStyleScale(opclass.CustomOp, name="docs_style::scale", out=True):
        ...     @staticmethod
        ...     @opclass.style("out")
        ...     def cpu(x, *, out):
        ...         torch.mul(x, 2, out=out)
        ...     @staticmethod
        ...     def abstract(x: torch.Tensor) -> torch.Tensor:
        ...         return torch.empty_like(x)
        >>> DocsStyleScale(torch.ones(2)), DocsStyleScale(torch.ones(2), out=torch.empty(2))
        (tensor([2., 2.]), tensor([2., 2.]))
        >>> opclass.remove(DocsStyleScale)
    """
    if kind not in STYLES:
        raise ValueError(f"opclass.style({kind!r}): the styles are {', '.join(map(repr, STYLES))}")

    def mark(fn: F) -> F:
        inner = fn.__func__ if isinstance(fn, staticmethod) else fn
        setattr(inner, STYLE, kind)
        return fn

    return mark


def style_of(fn: Any) -> str:
    """The style ``fn`` is written in (``"functional"`` unless :func:`style` says otherwise)."""
    return getattr(fn, STYLE, "functional")


@dataclasses.dataclass(frozen=True)
class Convention:
    """Which calling convention an install serves, and what adapting a kernel to it needs."""

    #: ``"functional"``, ``"out"`` or ``"inplace"``.
    kind: str = "functional"
    #: The functional op's ``ns::name[.overload]``: provider orders, modes and tuning tables are its.
    base: str = ""
    #: The out arguments' names, one per output of the functional op (``out`` or ``out0``...).
    outs: tuple[str, ...] = ()
    #: The arguments ``inplace=`` names, in the order the functional op returns their results.
    donated: tuple[str, ...] = ()
    #: On the functional op: the qualified names of the overloads it offers beside itself, by kind.
    siblings: tuple[tuple[str, str], ...] = ()


def out_names(schema: torch._C.FunctionSchema) -> tuple[str, ...]:
    """The names of the out arguments for the op's outputs: ``out``, or ``out0``, ``out1``... (as torchgen names them)."""
    n = len(schema.returns)
    return ("out",) if n == 1 else tuple(f"out{i}" for i in range(n))


def _params(schema: torch._C.FunctionSchema, alias: dict[str, str], text: str | None) -> list[str]:
    """The schema's parameters as text (``*`` included), those in ``alias`` annotated written;
    ``text``: the schema as the class wrote it (``k=2.0``, where ``str(schema)`` says ``k=2.``)."""
    found = [p for p in split_top((text or str(schema)).partition("(")[2].rpartition(") -> ")[0]) if p]
    for i, p in enumerate(found):
        name = p.partition("=")[0].split()[-1] if p != "*" else ""
        if name in alias:
            found[i] = f"Tensor({alias[name]}!) {name}"  # a plain Tensor without default (problem() says so)
    return found


def out_schema(schema: torch._C.FunctionSchema, text: str | None = None) -> str:
    """The ``.out`` overload's schema (without its name) for the functional ``schema``."""
    names = out_names(schema)
    letters = _letters(len(names))
    params = _params(schema, {}, text)
    star = "" if "*" in params else "*, "
    params += [f"{star if i == 0 else ''}Tensor({c}!) {n}" for i, (c, n) in enumerate(zip(letters, names))]
    returns = [f"Tensor({c}!)" for c in letters]
    return f"({', '.join(params)}) -> {returns[0] if len(returns) == 1 else '(' + ', '.join(returns) + ')'}"


def inplace_schema(schema: torch._C.FunctionSchema, donated: Sequence[str], text: str | None = None) -> str:
    """The in-place op's schema: ``donated`` written and returned, in that order."""
    letters = dict(zip(donated, _letters(len(donated))))
    returns = [f"Tensor({letters[n]}!)" for n in donated]
    return f"({', '.join(_params(schema, letters, text))}) -> {returns[0] if len(returns) == 1 else '(' + ', '.join(returns) + ')'}"


def _letters(n: int) -> list[str]:
    return list(string.ascii_lowercase[:n]) if n <= 26 else [f"a{i}" for i in range(n)]


def problem(schema: torch._C.FunctionSchema, out: bool, donated: Sequence[str], styles: Sequence[str]) -> tuple[str, str] | None:
    """``(problem, fix)`` where the functional ``schema`` cannot have the overloads asked for, or
    kernels of the ``styles`` given; ``None`` where it can."""
    table, returns = Arguments.of(schema), returns_of(schema)
    wants_out, wants_inplace = out or "out" in styles, bool(donated) or "inplace" in styles
    if (wants_out or wants_inplace) and table.written:
        return "out=, inplace= and kernels of another style are for a functional op, and this one mutates " + ", ".join(a.name for a in table.written), "drop mutates_args: the in-place overload is what inplace=('x',) declares"
    if (wants_out or wants_inplace) and (not returns or any(r != "Tensor" for r in returns)):
        return f"out=, inplace= and kernels of another style need an op whose outputs are each a Tensor, and it returns ({', '.join(returns)})", "return Tensor or tuple[Tensor, ...]"
    if wants_out:
        clash = [n for n in out_names(schema) if n in table.names]
        if clash:
            return f"the out argument {clash[0]!r} would have the name of a parameter of the op", f"rename the parameter {clash[0]!r}"
        if len(table) + len(returns) > MAX_ARGUMENTS:
            return f"the .out overload would take {len(table)} arguments and {len(returns)} out buffers, more than the dispatcher's {MAX_ARGUMENTS}", "take fewer arguments (a list of Tensors), or drop out=True"
    if "inplace" in styles and not donated:
        return "a kernel written in place needs the arguments it writes", "name them in the class statement: inplace=('x',)"
    for name in donated:
        if name not in table.names:
            return f"inplace= names {name!r}, which is not a parameter ({', '.join(table.names)})", "name the Tensor arguments the in-place overload writes"
        if table[name].jit != "Tensor":
            return f"inplace= names {name!r}, which is {table[name].jit}, not a Tensor", "name plain Tensor arguments only"
    if donated and (len(set(donated)) != len(donated) or len(donated) != len(returns)):
        return f"inplace={tuple(donated)!r} must name one distinct argument per output of the op ({len(returns)})", "name, in order, the argument each output is written into"
    return None


def forms(qualname: str, schema: torch._C.FunctionSchema, text: str, donated: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Per overload kind: its qualified name and schema text, for the functional op ``qualname``
    (the ``.out`` form always: out-style kernels are checked against it)."""
    found = {"out": out_schema(schema, text), **({"inplace": inplace_schema(schema, donated, text)} if donated else {})}
    return {kind: (named(qualname, kind), t) for kind, t in found.items()}


def named(qualname: str, kind: str) -> str:
    """The qualified name of the functional op ``qualname``'s other overload ``kind``: ``ns::op.out``
    (``ns::op.ovl_out``); the in-place one is an op of its own, ``ns::op_`` (``ns::op_.ovl``), as
    torch names in-place ops. (As an overload of ``ns::op`` its schema would differ from the
    functional one in alias annotations only, and torch's operator registry cannot take such a
    pair apart again: removing or redefining the op would corrupt it.)"""
    ns, _, rest = qualname.partition("::")
    name, _, overload = rest.partition(".")
    if kind == "inplace":
        return f"{ns}::{name}_" + (f".{overload}" if overload else "")
    return f"{ns}::{name}.{overload + '_' if overload else ''}{kind}"


def with_siblings(spec: OpSpec, out: bool, donated: tuple[str, ...], parsed: Mapping[str, tuple[str, torch._C.FunctionSchema, Arguments]], carried: Mapping[str, Any]) -> OpSpec:
    """``spec`` with its convention, and the specs of the overloads the class asks for: each takes
    the ``carried`` hooks' values as they are (the install adapts each kernel to its overload)."""
    base = Convention("functional", spec.qualname, out_names(spec.schema) if "out" in parsed else (), donated)
    made = []
    for kind in [k for k, on in (("out", out), ("inplace", bool(donated))) if on]:
        text, schema, table = parsed[kind]
        qualname = named(spec.qualname, kind)
        name, _, overload = qualname.partition("::")[2].partition(".")
        # Tagged as torch's own out= and in-place overloads are, where this torch has the tags.
        tag = OUT_TAG if kind == "out" else INPLACE_TAG if donated == (table.positional[0].name,) else None
        tags = (*spec.tags, *([tag] if tag is not None else []))
        made.append(dataclasses.replace(
            spec, qualname=qualname, name=name, overload=overload, schema_str=text, schema=schema, arguments=table,
            signature=python_signature(table, schema), tags=tags, defined_tags=tuple(dict.fromkeys((*spec.defined_tags, *tags))), hooks=dict(carried),
            cls_name=f"{spec.cls_name}.{kind}", is_inplace=tagged_inplace(tags), is_out=kind == "out", convention=dataclasses.replace(base, kind=kind),
        ))
    if not made and not parsed:
        return spec
    return dataclasses.replace(spec, convention=dataclasses.replace(base, siblings=tuple((m.convention.kind, m.qualname) for m in made)), siblings=tuple(made))


def inductor_trap(schema: torch._C.FunctionSchema) -> list[str]:
    """The parameters that break Inductor's lowering of the op to its ``.out`` overload: torch
    2.13 to 2.15 pass an argument at its default twice (none where torch has no ``Tag.out``,
    which that lowering needs)."""
    if OUT_TAG is None:
        return []
    return [a.name for a in Arguments.of(schema) if a.has_default]
