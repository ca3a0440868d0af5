"""Python annotations and defaults -> schema types and default texts.

Everything ``torch.library.custom_op`` infers is accepted, plus ``tuple[T, ...]`` inputs, keyword-only
Tensors, ``Optional[Tensor]`` returns, ``torch.layout`` and ``torch.memory_format``.

Example:
    >>> from typing import Callable, Optional
    >>> from opclass.define.annotations import param_type
    >>> param_type(Optional[list[int]])
    'SymInt[]?'
"""

from __future__ import annotations

import builtins
import collections.abc
import contextlib
import dataclasses
import sys
import types
import typing
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from opclass.core import memo
from opclass.core.compat import plain_opaque_values
from opclass.core.types import BY_ANNOTATION, BY_SCHEMA
from opclass.errors import format_annotation


@dataclasses.dataclass(frozen=True)
class SchemaType:
    """``typing.Annotated[T, SchemaType("int")]``: the schema type a parameter of Python type
    ``T`` gets, where it is not the one ``T`` gets by default. Type checkers read the
    annotation as ``T``; :data:`Int` is the one a library needs (a plain ``int``, not ``SymInt``).

    Example:
        >>> from typing import Annotated
        >>> from opclass.define.annotations import SchemaType, param_type
        >>> param_type(Annotated[int, SchemaType("int")]), param_type(list[Annotated[int, SchemaType("int")]])
        ('int', 'int[]')
    """

    text: str

    def __post_init__(self) -> None:
        if self.text not in _MARKED:
            raise ValueError(f"SchemaType({self.text!r}): supported are {', '.join(repr(t) for t in _MARKED)}")

    def __repr__(self) -> str:
        # As written in code; errors.format_annotation shows Annotated[int, SchemaType('int')] as opclass.Int.
        return f"SchemaType({self.text!r})"


@dataclasses.dataclass(frozen=True)
class Alias:
    """``typing.Annotated[Tensor, opclass.Alias("x")]``, as a return annotation: the op returns
    its argument ``x`` itself. With ``x`` in ``mutates_args`` the schema says so (``Tensor(a!) x
    ... -> Tensor(a!)``: an op that writes ``x`` and returns it, as in-place ops do); type
    checkers read the annotation as ``Tensor``. A return that is a *view* of an unwritten
    argument (``Tensor(a) x -> Tensor(a)``) is refused as torch's custom ops refuse views.

    Example:
        >>> from typing import Annotated
        >>> import torch, opclass
        >>> class DocsAliasAdd(opclass.CustomOp, name="docs_alias::add_", mutates_args=("x",)):
        ...     @staticmethod
        ...     def cpu(x: torch.Tensor, y: torch.Tensor) -> Annotated[torch.Tensor, opclass.Alias("x")]:
        ...         return x.add_(y)
        >>> DocsAliasAdd.schema
        '(Tensor(a0!) x, Tensor y) -> Tensor(a0!)'
        >>> opclass.remove(DocsAliasAdd)
    """

    name: str


# What a SchemaType may say, and the Python type it must annotate.
_MARKED: dict[str, Any] = {"int": int, "SymInt": int}

#: A plain ``int`` argument (schema ``int``; ``list[Int]``: ``int[]``): one the op's code and
#: ``torch.compile`` may specialise on, such as ``quant_min``, ``axis`` or ``group_size``. A bare
#: ``int`` is ``SymInt``, as in ``torch.library.custom_op``, so symbolic sizes flow through.
#: Type checkers read it as ``int``.
#:
#: Example: ``def default(x: Tensor, axis: opclass.Int, sizes: list[opclass.Int]) -> Tensor``
Int = typing.Annotated[int, SchemaType("int")]

#: The supported-types table shown in the docs: annotation -> schema type.
SUPPORTED_TYPES: list[tuple[str, str]] = [
    ("Tensor", "Tensor"),
    ("int", "SymInt"),
    ("opclass.Int (typing.Annotated[int, opclass.SchemaType('int')])", "int"),
    ("float", "float"),
    ("bool", "bool"),
    ("str", "str"),
    ("torch.types.Number (int | float | bool)", "Scalar"),
    ("torch.dtype", "ScalarType"),
    ("torch.device", "Device"),
    ("torch.layout", "Layout"),
    ("torch.memory_format", "MemoryFormat"),
    ("typing.NewType of a type above (torch.distributed's GroupName: str)", "that type's"),
    ("Optional[T] / T | None, for any T above", "T?"),
    ("list[T] / Sequence[T] / tuple[T, ...], T in Tensor, int, opclass.Int, float, bool, Number, str, torch.device", "T[]"),
    ("list[Optional[Tensor]]", "Tensor?[]"),
    ("Optional[list[T]], T as in T[] but Tensor", "T[]?"),
    ("a frozen dataclass (a config object)", "its opaque value type"),
]


class SchemaProblem(Exception):
    """An annotation or default that has no schema form; the builder turns it into OpDefinitionError."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def resolve_annotations(fn: Any) -> dict[str, Any]:
    """The evaluated annotations of ``fn`` (``from __future__ import annotations`` included).

    Strings are evaluated in the function's module globals, also where they are nested
    (``list["Tensor"]``, ``Optional["Tensor"]``); names that only exist in an enclosing function
    are found through the closure, which is how locally defined ops still work.
    """
    return dict(memo.once("annotations", fn, _resolve_annotations))  # a copy: the caller's to change


def _resolve_annotations(fn: Any) -> dict[str, Any]:
    raw = dict(getattr(fn, "__annotations__", {}) or {})
    if not any(_has_string(v) for v in raw.values()):
        return raw
    namespace: dict[str, Any] = {**vars(builtins), "Tensor": Tensor, "torch": torch, "typing": typing}
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    namespace.update(getattr(fn, "__globals__", None) or (vars(module) if module else {}))
    for name, cell in zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), getattr(fn, "__closure__", None) or ()):
        with contextlib.suppress(ValueError):  # a cell not yet assigned
            namespace[name] = cell.cell_contents
    resolved = {}
    for key, value in raw.items():
        try:
            resolved[key] = _evaluate(value, namespace)
        except Exception as e:
            raise SchemaProblem(
                f"annotation {value!r} of {key!r} cannot be evaluated ({type(e).__name__}: {e})",
                "import the names it uses at module level",
            ) from None
    return resolved


def _has_string(ann: Any) -> bool:
    return isinstance(ann, (str, typing.ForwardRef)) or any(_has_string(a) for a in typing.get_args(ann) if a is not Ellipsis)


def _evaluate(ann: Any, namespace: dict[str, Any]) -> Any:
    """``ann`` with every string in it (at the top or nested) evaluated."""
    if isinstance(ann, str):
        return _evaluate(eval(ann, namespace), namespace)  # noqa: S307 - annotations are the user's own code
    if isinstance(ann, typing.ForwardRef):
        return _evaluate(ann.__forward_arg__, namespace)
    if not _has_string(ann):  # no string among its arguments
        return ann
    new = tuple(a if a is Ellipsis else _evaluate(a, namespace) for a in typing.get_args(ann))
    if _union_members(ann):
        return typing.Union[new]
    if isinstance(ann, types.GenericAlias):
        return types.GenericAlias(typing.get_origin(ann), new)
    return ann.copy_with(new)


def _union_members(ann: Any) -> tuple[Any, ...]:
    """The members of ``Union[X, Y]`` / ``X | Y``; ``()`` for any other annotation."""
    origin = typing.get_origin(ann)
    return typing.get_args(ann) if origin is typing.Union or origin is types.UnionType else ()


def _optional_inner(ann: Any) -> Any:
    """``X`` for ``Optional[X]`` / ``X | None``; ``None`` otherwise."""
    members = _union_members(ann)
    rest = [a for a in members if a is not type(None)]
    if len(rest) == len(members):
        return None
    return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]


def _element(ann: Any) -> Any:
    """The element type of ``list[X]``, ``Sequence[X]`` or ``tuple[X, ...]``; ``None`` otherwise."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    sequence = origin in (list, collections.abc.Sequence) and len(args) == 1
    return args[0] if sequence or (origin is tuple and len(args) == 2 and args[1] is Ellipsis) else None


def _base(ann: Any) -> str | None:
    if typing.get_origin(ann) is typing.Annotated:
        marked = next((m.text for m in ann.__metadata__ if isinstance(m, SchemaType)), None)
        inner = typing.get_args(ann)[0]
        if marked is None:
            return _base(inner)  # other tools' metadata: the type itself decides
        if inner is not _MARKED[marked]:
            raise SchemaProblem(f"SchemaType({marked!r}) annotates {format_annotation(inner)}, not {_MARKED[marked].__name__}", f"write Annotated[{_MARKED[marked].__name__}, SchemaType({marked!r})]")
        return marked
    if (row := BY_ANNOTATION.get(ann)) is not None:
        return row.schema
    if getattr(ann, "__supertype__", None) is not None:
        # typing.NewType over a supported type, like torch.distributed's GroupName (a str).
        return _base(ann.__supertype__)
    members = set(_union_members(ann))
    if len(members) >= 2 and members <= {int, float, bool}:  # torch.types.Number and its kin
        return "Scalar"
    return None


def param_type(ann: Any) -> str:
    """The schema type for a parameter annotation, e.g. ``Optional[list[int]]`` -> ``SymInt[]?``."""
    if (base := _base(ann)) is not None:
        return base
    if isinstance(ann, SchemaType):
        written = "opclass.Int" if ann.text == "int" else f"Annotated[{_MARKED[ann.text].__name__}, opclass.SchemaType({ann.text!r})]"
        raise SchemaProblem(f"{ann!r} is not an annotation by itself", f"it marks a type inside Annotated: write {written}")
    if dataclasses.is_dataclass(ann) and isinstance(ann, type):
        return config_type(ann)
    if (inner := _optional_inner(ann)) is not None:
        t = _list_type(inner) or _base(inner)
        # The dispatcher has no optional Tensor list (``Tensor[]?``) nor optional of an optional.
        if t is None or t.endswith("?") or t == "Tensor[]" or t == "Tensor?[]":
            return _unsupported(ann)
        return t + "?"
    return _list_type(ann) or _unsupported(ann)


# Field types a config object may hold: constants that compile can guard on and FX can print.
_CONFIG_FIELDS = (int, float, bool, str, type(None))


def config_type(cls: type) -> str:
    """The schema type of a config dataclass: the name torch gives it as an opaque *value* type.

    The dispatcher hands the object to the kernel as is; torch.compile treats it as a constant
    (guarded with ``__eq__``, so another value recompiles); FX and export print it with
    ``__fx_repr__``. Nothing is registered here: the install registers the type with torch
    (:func:`opclass.core.compat.register_config`), so a refused class leaves torch as it was.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise SchemaProblem(f"config class {cls.__qualname__} is a mutable dataclass", "declare it @dataclasses.dataclass(frozen=True)")
    if "<locals>" in cls.__qualname__:
        raise SchemaProblem(f"config class {cls.__qualname__} is defined inside a function", "define it at module level (its name goes into the schema)")
    if not plain_opaque_values():
        raise SchemaProblem(
            f"config class {cls.__qualname__} cannot be an op argument on torch {torch.__version__}, whose opaque value types must derive from a private torch class",
            "use torch 2.12 or later for config objects, or pass the fields as separate arguments",
        )
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        ann = hints.get(field.name)
        if not (ann in _CONFIG_FIELDS or _optional_inner(ann) in _CONFIG_FIELDS or _element(ann) in _CONFIG_FIELDS):
            raise SchemaProblem(
                f"config class {cls.__qualname__} field {field.name}: {format_annotation(ann)} cannot be part of a constant",
                "use int, float, bool, str, their Optional forms, or tuple[T, ...] of them",
            )
    return config_name(cls)


def config_name(cls: type) -> str:
    """The name torch registers a config class under, which the schema spells."""
    return f"{cls.__module__}.{cls.__qualname__}"


def configs_of(kernels: Sequence[Any]) -> dict[str, type]:
    """Parameter name -> config dataclass, from the first of ``kernels`` whose annotations have any
    (annotations that do not resolve have none here: schema derivation reports them)."""
    for fn in kernels:
        try:
            found = {n: a for n, a in resolve_annotations(fn).items() if isinstance(a, type) and dataclasses.is_dataclass(a)}
        except SchemaProblem:
            continue
        if found:
            return found
    return {}


def _list_type(ann: Any) -> str | None:
    elem = _element(ann)  # None: _base and _optional_inner give None too
    if (base := _base(elem)) is not None and BY_SCHEMA[base].listable:
        return base + "[]"
    if _optional_inner(elem) is Tensor:
        return "Tensor?[]"
    return None


# Types a schema has that torch cannot carry through every path a custom op takes.
_REFUSED: dict[Any, tuple[str, str]] = {
    torch.Generator: ("Generator?", "torch.compile cannot pass a torch.Generator to a custom op"),
    torch.UntypedStorage: ("Storage", "torch.compile and torch.export cannot pass a Storage to a custom op"),
    torch.Stream: ("Stream", "torch.compile and torch.export cannot pass a Stream to a custom op"),
    torch.dtype: ("ScalarType[]", "torch.library.opcheck cannot check a list of dtypes"),
}


def _unsupported(ann: Any) -> str:
    text = format_annotation(ann)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    refused = _REFUSED.get(_optional_inner(ann) or _element(ann) or ann)
    if refused is not None and (refused[0].endswith("[]") == (_element(ann) is not None)):
        raise SchemaProblem(
            f"unsupported annotation {text}: {refused[1]}",
            f"take the value another way (a seed, a list of str...), or write it {refused[0]} in schema= if eager calls are all you need",
        )
    if origin is tuple:
        elems = {a for a in args if a is not Ellipsis}
        one = format_annotation(next(iter(elems))) if len(elems) == 1 else None
        fix = f"write tuple[{one}, ...] or list[{one}]" if one is not None else "inputs cannot be fixed-length tuples; write list[T] or separate parameters"
    elif origin in (dict, collections.abc.Mapping) or ann in (dict, typing.Dict):
        fix = "pass the values as separate parameters"
    elif ann is typing.Any or ann is object:
        fix = "write a concrete schema type such as Tensor or int"
    elif (origin or ann) in (list, tuple, collections.abc.Sequence) and not args:
        fix = "give the element type, e.g. list[Tensor] or list[int]"
    elif (getattr(ann, "__module__", "") or "").startswith("numpy"):
        fix = "take a Tensor and convert with .numpy() inside the kernel"
    elif _element(ann) is not None or origin is not None:
        fix = "supported are list[T] / tuple[T, ...] of Tensor, int, opclass.Int, float, bool, Number, str, torch.device, and list[Optional[Tensor]]"
    else:
        fix = (
            "supported are Tensor, int, opclass.Int, float, bool, str, Number, torch.dtype, torch.device, torch.layout, "
            "torch.memory_format, their Optional forms and lists; or pass schema="
        )
    raise SchemaProblem(f"unsupported annotation {text}", fix)


def return_type(ann: Any, alias: Callable[[str], str] = lambda name: "Tensor") -> str:
    """The schema return for a return annotation: ``Tensor``, ``(Tensor, Tensor)``, ``()``...;
    ``alias(name)`` writes a return annotated :class:`Alias` (``Tensor(a0!)``)."""
    if ann is None or ann is type(None):
        return "()"
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if not args or Ellipsis in args:
            raise SchemaProblem(f"unsupported return annotation {format_annotation(ann)}", "write tuple[Tensor, Tensor] with one entry per output")
        inner = ", ".join(_single_return(a, ann, alias) for a in args)
        return f"(({inner}))" if len(args) == 1 else f"({inner})"
    return _single_return(ann, ann, alias)


def _single_return(ann: Any, whole: Any, alias: Callable[[str], str]) -> str:
    if typing.get_origin(ann) is typing.Annotated and (named := next((m.name for m in ann.__metadata__ if isinstance(m, Alias)), None)) is not None:
        if typing.get_args(ann)[0] is not Tensor:
            raise SchemaProblem(f"opclass.Alias({named!r}) annotates {format_annotation(typing.get_args(ann)[0])}, not a Tensor", f"write Annotated[Tensor, opclass.Alias({named!r})]")
        return alias(named)
    if (base := _base(ann)) is not None and BY_SCHEMA[base].returnable:
        return base
    if _element(ann) is Tensor and typing.get_origin(ann) is list:
        return "Tensor[]"
    if _optional_inner(ann) is Tensor:
        return "Tensor?"
    raise SchemaProblem(
        f"unsupported return annotation {format_annotation(whole)}",
        "return Tensor, list[Tensor], Optional[Tensor], int, float, bool, Number, None, or a tuple of those",
    )


def check_default(value: Any, schema_type: str) -> None:
    """Raise :class:`SchemaProblem` if ``value`` cannot be a default for ``schema_type``."""
    base = schema_type.rstrip("?")
    if value is None:
        return
    if base.endswith("[]"):
        if not isinstance(value, (tuple, list)):
            raise SchemaProblem(f"default {value!r} has type {type(value).__name__}, not a sequence", "give a tuple default, e.g. (1, 2)")
        for v in value:
            check_default(v, base[:-2])
        return
    if base.startswith("Tensor"):
        raise SchemaProblem(f"default {value!r}: a Tensor parameter can only default to None", "write = None and make the Tensor inside the kernel")
    allowed = row.defaults if (row := BY_SCHEMA.get(base)) is not None else ()
    if not isinstance(value, allowed) or (base in ("SymInt", "int", "float") and isinstance(value, bool)):
        wanted = " or ".join(t.__name__ for t in allowed) or "None"
        raise SchemaProblem(f"default {value!r} has type {type(value).__name__}, not {wanted}", f"give a default of the annotated type ({schema_type})")


def default_text(value: Any, schema_type: str) -> str:
    """How ``value`` is written as a schema default, e.g. ``torch.float32`` -> ``float32``."""
    check_default(value, schema_type)
    if value is None:
        # torch's infer_schema writes ``x: Tensor = None`` as ``Tensor x=None``, which takes None
        # given or left out. Other types written so take None only when left out (torch.ops
        # raises on ``f(x, None)``), and a list type does not parse: those are refused.
        if schema_type.endswith("?") or schema_type == "Tensor":
            return "None"
        raise SchemaProblem(f"default None for non-optional type {schema_type} (torch.ops would refuse None passed for it)", "annotate it Optional[...]")
    if isinstance(value, (int, float)):  # a bool too: repr(True) is True
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, torch.device):
        return f'"{value}"'
    if isinstance(value, torch.dtype) or value is torch.strided or value is torch.contiguous_format:
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.layout, torch.memory_format)):
        raise SchemaProblem(
            f"default {value} cannot be written in a schema (only torch.strided and torch.contiguous_format can)",
            "annotate it Optional[...] with default None and pick the value inside the kernel",
        )
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, bool)) for v in value):
        return "[" + ", ".join(default_text(v, schema_type.rstrip("?")[:-2]) for v in value) + "]"
    raise SchemaProblem(
        f"default {value!r} of type {type(value).__name__} has no schema form",
        "use None, a number, bool, str, torch.dtype, torch.device, torch.layout, torch.memory_format or a tuple of numbers",
    )
