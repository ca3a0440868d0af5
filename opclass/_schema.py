"""Python annotations <-> dispatcher schema strings.

Everything ``torch.library.custom_op`` infers is accepted, plus ``tuple[T, ...]`` inputs, keyword-only
Tensors, ``Optional[Tensor]`` returns, ``torch.layout`` and ``torch.memory_format``.
"""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import inspect
import sys
import types
import typing
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

from . import _memo
from ._compat import plain_opaque_values, tagged_inplace, tagged_out
from .errors import format_annotation

# Base Python types and the schema type each becomes.
_BASE: dict[Any, str] = {
    Tensor: "Tensor",
    int: "SymInt",
    float: "float",
    bool: "bool",
    str: "str",
    torch.types.Number: "Scalar",
    torch.dtype: "ScalarType",
    torch.device: "Device",
    torch.layout: "Layout",
    torch.memory_format: "MemoryFormat",
}
# Element types that may appear in a list (``T[]``), and those whose list may be optional (``T[]?``).
_LISTABLE = {"Tensor", "SymInt", "float", "bool", "Scalar"}
_RETURNS = {"Tensor", "SymInt", "float", "bool", "Scalar"}
_SEQUENCE_ORIGINS = (list, collections.abc.Sequence, tuple)

#: The supported-types table shown in the docs: annotation -> schema type.
SUPPORTED_TYPES: list[tuple[str, str]] = [
    ("Tensor", "Tensor"),
    ("int", "SymInt"),
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
    ("list[T] / Sequence[T] / tuple[T, ...], T in Tensor, int, float, bool, Number", "T[]"),
    ("list[Optional[Tensor]]", "Tensor?[]"),
    ("Optional[list[T]], T in int, float, bool", "T[]?"),
]


class SchemaProblem(Exception):
    """An annotation or default that has no schema form; the builder turns it into OpDefinitionError."""

    def __init__(self, param: str | None, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.param = param
        self.problem = problem
        self.fix = fix


# --------------------------------------------------------------------------- annotations


def resolve_annotations(fn: Any) -> dict[str, Any]:
    """The evaluated annotations of ``fn`` (``from __future__ import annotations`` included).

    Strings are evaluated in the function's module globals, also where they are nested
    (``list["Tensor"]``, ``Optional["Tensor"]``); names that only exist in an enclosing function
    are found through the closure, which is how locally defined ops still work.
    """
    return dict(_memo.once("annotations", fn, _resolve_annotations))  # a copy: the caller's to change


def _resolve_annotations(fn: Any) -> dict[str, Any]:
    raw = dict(getattr(fn, "__annotations__", {}) or {})
    if not any(_has_string(v) for v in raw.values()):
        return raw
    namespace: dict[str, Any] = dict(vars(builtins))
    namespace.update({"Tensor": Tensor, "torch": torch, "typing": typing})
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    namespace.update(getattr(fn, "__globals__", None) or (vars(module) if module else {}))
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None)
    if code is not None and closure:
        for name, cell in zip(code.co_freevars, closure):
            try:
                namespace[name] = cell.cell_contents
            except ValueError:
                pass
    resolved = {}
    for key, value in raw.items():
        try:
            resolved[key] = _evaluate(value, namespace)
        except Exception as e:
            who = "return" if key == "return" else key
            raise SchemaProblem(
                None if key == "return" else key,
                f"annotation {value!r} of {who!r} cannot be evaluated ({type(e).__name__}: {e})",
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
    args = typing.get_args(ann)
    if not any(_has_string(a) for a in args if a is not Ellipsis):
        return ann
    new = tuple(a if a is Ellipsis else _evaluate(a, namespace) for a in args)
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[new]
    if isinstance(ann, types.GenericAlias):
        return types.GenericAlias(origin, new)
    return ann.copy_with(new)


def _optional_inner(ann: Any) -> Any:
    """``X`` for ``Optional[X]`` / ``X | None``; ``None`` otherwise."""
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(ann)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return None


def _is_scalar_union(ann: Any) -> bool:
    origin = typing.get_origin(ann)
    if origin is typing.Union or origin is types.UnionType:
        members = set(typing.get_args(ann))
        return len(members) >= 2 and members <= {int, float, bool}
    return False


def _element(ann: Any) -> Any:
    """The element type of ``list[X]``, ``Sequence[X]`` or ``tuple[X, ...]``; ``None`` otherwise."""
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        return args[0]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def _base(ann: Any) -> str | None:
    if ann in _BASE:
        return _BASE[ann]
    if getattr(ann, "__supertype__", None) is not None:
        # typing.NewType over a supported type, like torch.distributed's GroupName (a str).
        return _base(ann.__supertype__)
    if _is_scalar_union(ann):
        return "Scalar"
    return None


def param_type(ann: Any) -> str:
    """The schema type for a parameter annotation, e.g. ``Optional[list[int]]`` -> ``SymInt[]?``."""
    base = _base(ann)
    if base is not None:
        return base
    if dataclasses.is_dataclass(ann) and isinstance(ann, type):
        return config_type(ann)
    inner = _optional_inner(ann)
    if inner is not None:
        t = _list_type(inner) or _base(inner)
        # The dispatcher has no optional Tensor list (``Tensor[]?``) nor optional of an optional.
        if t is None or t.endswith("?") or t == "Tensor[]" or t == "Tensor?[]":
            return _unsupported(ann)
        return t + "?"
    t = _list_type(ann)
    if t is not None:
        return t
    return _unsupported(ann)


# Field types a config object may hold: constants that compile can guard on and FX can print.
_CONFIG_FIELDS = (int, float, bool, str, type(None))


def config_type(cls: type) -> str:
    """The schema type of a config dataclass: it becomes a torch opaque *value* type.

    The dispatcher hands the object to the kernel as is; torch.compile treats it as a constant
    (guarded with ``__eq__``, so another value recompiles); FX and export print it with
    ``__fx_repr__``, which is added here when the class has none.
    """
    from torch._library import opaque_object

    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise SchemaProblem(None, f"config class {cls.__qualname__} is a mutable dataclass", "declare it @dataclasses.dataclass(frozen=True)")
    if "<locals>" in cls.__qualname__:
        raise SchemaProblem(None, f"config class {cls.__qualname__} is defined inside a function", "define it at module level (its name goes into the schema)")
    if not plain_opaque_values():
        raise SchemaProblem(
            None,
            f"config class {cls.__qualname__} cannot be an op argument on torch {torch.__version__}, whose opaque value types must derive from a private torch class",
            "use torch 2.12 or later for config objects, or pass the fields as separate arguments",
        )
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        ann = hints.get(field.name)
        elem = _element(ann)
        if not (ann in _CONFIG_FIELDS or _optional_inner(ann) in _CONFIG_FIELDS or elem in _CONFIG_FIELDS):
            raise SchemaProblem(
                None,
                f"config class {cls.__qualname__} field {field.name}: {format_annotation(ann)} cannot be part of a constant",
                "use int, float, bool, str, their Optional forms, or tuple[T, ...] of them",
            )
    if not opaque_object.is_opaque_value_type(cls):
        if "__fx_repr__" not in vars(cls):
            cls.__fx_repr__ = _fx_repr  # type: ignore[attr-defined]
        opaque_object.register_opaque_type(cls, typ="value")
    return opaque_object.get_opaque_type_name(cls)


def _fx_repr(self: Any) -> tuple[str, dict[str, type]]:
    return repr(self), {type(self).__name__: type(self)}


def _list_type(ann: Any) -> str | None:
    elem = _element(ann)
    if elem is None:
        return None
    base = _base(elem)
    if base in _LISTABLE:
        return base + "[]"
    opt = _optional_inner(elem)
    if opt is Tensor:
        return "Tensor?[]"
    return None


def _unsupported(ann: Any) -> str:
    text = format_annotation(ann)
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is tuple:
        elems = [a for a in args if a is not Ellipsis]
        if len(set(elems)) == 1 and elems:
            fix = f"write tuple[{format_annotation(elems[0])}, ...] or list[{format_annotation(elems[0])}]"
        else:
            fix = "inputs cannot be fixed-length tuples; write list[T] or separate parameters"
        raise SchemaProblem(None, f"unsupported annotation {text}", fix)
    if origin in (dict, collections.abc.Mapping) or ann in (dict, typing.Dict):
        raise SchemaProblem(None, f"unsupported annotation {text}", "pass the values as separate parameters")
    if ann is typing.Any or ann is object:
        raise SchemaProblem(None, f"unsupported annotation {text}", "write a concrete schema type such as Tensor or int")
    if ann in (list, tuple, collections.abc.Sequence) or (origin in _SEQUENCE_ORIGINS and not args):
        raise SchemaProblem(None, f"unsupported annotation {text}", "give the element type, e.g. list[Tensor] or list[int]")
    module = getattr(ann, "__module__", "") or ""
    if module.startswith("numpy"):
        fix = "take a Tensor and convert with .numpy() inside the kernel"
    elif _element(ann) is not None or origin is not None:
        fix = "supported are list[T] / tuple[T, ...] of Tensor, int, float, bool, Number, and list[Optional[Tensor]]"
    else:
        fix = (
            "supported are Tensor, int, float, bool, str, Number, torch.dtype, torch.device, torch.layout, "
            "torch.memory_format, their Optional forms and lists; or pass schema="
        )
    raise SchemaProblem(None, f"unsupported annotation {text}", fix)


def return_type(ann: Any) -> str:
    """The schema return for a return annotation: ``Tensor``, ``(Tensor, Tensor)``, ``()``..."""
    if ann is None or ann is type(None):
        return "()"
    if typing.get_origin(ann) is tuple:
        args = typing.get_args(ann)
        if not args or Ellipsis in args:
            raise SchemaProblem(
                None, f"unsupported return annotation {format_annotation(ann)}", "write tuple[Tensor, Tensor] with one entry per output"
            )
        inner = ", ".join(_single_return(a, ann) for a in args)
        return f"(({inner}))" if len(args) == 1 else f"({inner})"
    return _single_return(ann, ann)


def _single_return(ann: Any, whole: Any) -> str:
    base = _base(ann)
    if base in _RETURNS:
        return base
    elem = _element(ann)
    if elem is Tensor and typing.get_origin(ann) is list:
        return "Tensor[]"
    if _optional_inner(ann) is Tensor:
        return "Tensor?"
    raise SchemaProblem(
        None,
        f"unsupported return annotation {format_annotation(whole)}",
        "return Tensor, list[Tensor], Optional[Tensor], int, float, bool, Number, None, or a tuple of those",
    )


# Python types a default may have, by schema base type (bool is an int, as in Python typing).
_DEFAULT_TYPES: dict[str, tuple[type, ...]] = {
    "SymInt": (int,), "float": (float, int), "bool": (bool,), "str": (str,), "Scalar": (int, float, bool),
    "ScalarType": (torch.dtype,), "Device": (torch.device, str), "Layout": (torch.layout,),
    "MemoryFormat": (torch.memory_format,), "Tensor": (),
}


def check_default(value: Any, schema_type: str) -> None:
    """Raise :class:`SchemaProblem` if ``value`` cannot be a default for ``schema_type``."""
    base = schema_type.rstrip("?")
    if value is None:
        return
    if base.endswith("[]"):
        elem = base[:-2]
        if not isinstance(value, (tuple, list)):
            raise SchemaProblem(None, f"default {value!r} has type {type(value).__name__}, not a sequence", "give a tuple default, e.g. (1, 2)")
        for v in value:
            check_default(v, elem)
        return
    if base.startswith("Tensor"):
        raise SchemaProblem(None, f"default {value!r}: a Tensor parameter can only default to None", "write = None and make the Tensor inside the kernel")
    allowed = _DEFAULT_TYPES.get(base, ())
    if not isinstance(value, allowed) or (base in ("SymInt", "float") and isinstance(value, bool) and base != "bool"):
        wanted = " or ".join(t.__name__ for t in allowed) or "None"
        raise SchemaProblem(None, f"default {value!r} has type {type(value).__name__}, not {wanted}", f"give a default of the annotated type ({schema_type})")


def default_text(value: Any, schema_type: str) -> str:
    """How ``value`` is written as a schema default, e.g. ``torch.float32`` -> ``float32``."""
    check_default(value, schema_type)
    if value is None:
        if not schema_type.endswith("?"):
            raise SchemaProblem(None, f"default None for non-optional type {schema_type}", "annotate it Optional[...]")
        return "None"
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return repr(value) if not isinstance(value, bool) else str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, torch.device):
        return f'"{value}"'
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if value is torch.strided or value is torch.contiguous_format:
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.layout, torch.memory_format)):
        raise SchemaProblem(
            None,
            f"default {value} cannot be written in a schema (only torch.strided and torch.contiguous_format can)",
            "annotate it Optional[...] with default None and pick the value inside the kernel",
        )
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float, bool)) for v in value):
        return "[" + ", ".join(default_text(v, schema_type.rstrip("?")[:-2]) for v in value) + "]"
    raise SchemaProblem(
        None,
        f"default {value!r} of type {type(value).__name__} has no schema form",
        "use None, a number, bool, str, torch.dtype, torch.device, torch.layout, torch.memory_format or a tuple of numbers",
    )


# --------------------------------------------------------------------------- derivation


def _suggest_annotation(name: str, default: Any) -> str:
    """An annotation for an unannotated parameter: from its default's type, else a neutral
    example naming it (``gain: float = 1.0``; ``x: Tensor or x: float``)."""
    if default is inspect.Parameter.empty:
        return f"{name}: Tensor or {name}: float"
    if default is None:
        return f"{name}: Optional[Tensor] = None or {name}: Optional[float] = None"
    kind = type(default)
    if kind in (bool, int, float, str):
        return f"{name}: {kind.__name__} = {default!r}"
    if isinstance(default, (torch.dtype, torch.device)):
        return f"{name}: torch.{kind.__name__} = {_default_repr(default)}"
    if isinstance(default, (tuple, list)) and default and all(type(v) is type(default[0]) and type(v) in (bool, int, float) for v in default):
        return f"{name}: Sequence[{type(default[0]).__name__}] = {default!r}"
    return f"{name}: <its type> = {default!r}"


def _default_repr(value: Any) -> str:
    """``torch.float32`` / ``torch.device('cpu')``: a default as the user would write it."""
    return repr(value) if isinstance(value, torch.device) else str(value)


def derive(fn: Any, mutates_args: Sequence[str], tags: Sequence[torch.Tag]) -> str:
    """The schema string ``(Tensor x, ...) -> Tensor`` for a kernel's annotated signature."""
    annotations = resolve_annotations(fn)
    sig = _memo.signature(fn)
    params = []
    saw_kw_only = False
    positional: list[tuple[int, str, str]] = []  # (index, name, type) of positional params
    out_names: list[str] = []
    for idx, (name, p) in enumerate(sig.parameters.items()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            kind = {p.VAR_POSITIONAL: "*args", p.VAR_KEYWORD: "**kwargs", p.POSITIONAL_ONLY: "positional-only parameters"}[p.kind]
            raise SchemaProblem(name, f"{kind} have no schema form", "list every parameter by name")
        if name not in annotations:
            raise SchemaProblem(name, f"parameter {name!r} has no annotation", f"annotate it, e.g. {_suggest_annotation(name, p.default)}")
        try:
            ptype = param_type(annotations[name])
        except SchemaProblem as e:
            raise SchemaProblem(name, f"parameter {name!r}: {e.problem}", e.fix) from None
        if p.kind is p.KEYWORD_ONLY and not saw_kw_only:
            params.append("*")
            saw_kw_only = True
        text = ptype
        if name in mutates_args:
            if not ptype.startswith("Tensor"):
                raise SchemaProblem(name, f"mutates_args names {name!r}, which is {ptype}, not a Tensor", f"remove {name!r} from mutates_args")
            text = f"Tensor(a{idx}!){ptype[len('Tensor'):]}"
            if tagged_out(tags):
                if p.kind is not p.KEYWORD_ONLY or ptype != "Tensor":
                    raise SchemaProblem(name, f"Tag.out needs {name!r} to be a keyword-only Tensor", f"write it after '*' as {name}: Tensor")
                out_names.append(name)
        if p.kind is not p.KEYWORD_ONLY:
            positional.append((idx, name, ptype))
        if p.default is not p.empty and dataclasses.is_dataclass(annotations[name]):
            raise SchemaProblem(name, f"config parameter {name!r} has a default, which a schema cannot hold", f"drop the default; callers pass {name} explicitly")
        if p.default is not p.empty:
            try:
                text += f" {name}={default_text(p.default, ptype)}"
            except SchemaProblem as e:
                raise SchemaProblem(name, f"parameter {name!r}: {e.problem}", e.fix) from None
        else:
            text += f" {name}"
        params.append(text)
    if "return" not in annotations:
        raise SchemaProblem(None, "the return has no annotation", "annotate it, e.g. -> Tensor, or -> None")
    ret = return_type(annotations["return"])
    if tagged_inplace(tags):
        if not positional or positional[0][2] != "Tensor" or set(mutates_args) != {positional[0][1]}:
            raise SchemaProblem(None, "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", "set mutates_args=(first parameter name,)")
        if ret != "Tensor":
            raise SchemaProblem(None, "Tag.inplace needs the return annotation -> Tensor", "return the mutated first argument, annotated -> Tensor")
        ret = f"Tensor(a{positional[0][0]}!)"
    if tagged_out(tags):
        if not out_names:
            raise SchemaProblem(None, "Tag.out needs at least one keyword-only Tensor in mutates_args", "add e.g. *, out: Tensor and mutates_args=('out',)")
        expected = "Tensor" if len(out_names) == 1 else "(" + ", ".join(["Tensor"] * len(out_names)) + ")"
        if ret != expected:
            raise SchemaProblem(None, f"Tag.out needs the return annotation to match the out arguments {tuple(out_names)}", f"annotate the return as {expected.replace('(', 'tuple[').replace(')', ']')}")
        aliases = [f"Tensor(a{list(sig.parameters).index(n)}!)" for n in out_names]
        ret = aliases[0] if len(aliases) == 1 else "(" + ", ".join(aliases) + ")"
    return "(" + ", ".join(params) + ") -> " + ret


def tensor_parameters(fn: Any) -> tuple[str, ...]:
    """The parameters annotated with a Tensor type (what ``mutates_args="unknown"`` marks mutated)."""
    found = []
    for name, ann in resolve_annotations(fn).items():
        try:
            if name != "return" and param_type(ann).startswith("Tensor"):
                found.append(name)
        except SchemaProblem:
            pass  # derive() reports it
    return tuple(found)


def tag_problem(schema: torch._C.FunctionSchema, tags: Sequence[torch.Tag]) -> tuple[str, str] | None:
    """``(problem, fix)`` when an explicit schema breaks the rules of ``Tag.inplace``/``Tag.out``
    (the same rules :func:`derive` applies to annotations)."""
    args, returns = list(schema.arguments), list(schema.returns)
    written = [a for a in args if a.alias_info is not None and a.alias_info.is_write]

    def aliases(x: Any) -> set[str]:
        return set(x.alias_info.before_set) if x.alias_info is not None else set()

    if tagged_inplace(tags):
        first = args[0] if args and not args[0].kwarg_only else None
        if first is None or str(first.type) != "Tensor" or [a.name for a in written] != [first.name]:
            return "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", "write e.g. schema='(Tensor(a!) x, float k) -> Tensor(a!)'"
        if len(returns) != 1 or str(returns[0].type) != "Tensor" or aliases(returns[0]) != aliases(first):
            return "Tag.inplace needs the op to return its first argument", "end the schema with -> Tensor(a!), the first argument's alias"
    if tagged_out(tags):
        if not written or any(not a.kwarg_only or str(a.type) != "Tensor" for a in written):
            return "Tag.out needs the mutated arguments to be keyword-only Tensors", "write e.g. schema='(Tensor x, *, Tensor(a!) out) -> Tensor(a!)'"
        if len(returns) != len(written) or any(aliases(r) != aliases(a) for r, a in zip(returns, written)):
            return "Tag.out needs the op to return its out arguments, in order", "write the returns as their aliases, e.g. -> (Tensor(a!), Tensor(b!))"
    return None


def parse(qualname: str, schema: str) -> torch._C.FunctionSchema:
    """Parse ``(args) -> ret`` for the op ``ns::name[.overload]``."""
    return torch._C.parse_schema(qualname + schema)


def mutated_names(schema: torch._C.FunctionSchema) -> list[str]:
    """Names of the arguments the schema marks as written to."""
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def describe_difference(a: torch._C.FunctionSchema, b: torch._C.FunctionSchema) -> str | None:
    """The first way two schemas differ, in words; ``None`` if they are the same."""
    if len(a.arguments) != len(b.arguments):
        return f"{len(a.arguments)} vs {len(b.arguments)} parameters"
    for x, y in zip(a.arguments, b.arguments):
        if x.name != y.name:
            return f"parameter {x.name!r} vs {y.name!r}"
        if str(x.real_type) != str(y.real_type):
            return f"parameter {x.name!r} is {x.real_type} vs {y.real_type}"
        if x.kwarg_only != y.kwarg_only:
            return f"parameter {x.name!r} is keyword-only in one only"
        if x.has_default_value() != y.has_default_value() or (
            x.has_default_value() and x.default_value != y.default_value
        ):
            dx = x.default_value if x.has_default_value() else "no default"
            dy = y.default_value if y.has_default_value() else "no default"
            return f"parameter {x.name!r} default {dx!r} vs {dy!r}"
    ra = [str(r.real_type) for r in a.returns]
    rb = [str(r.real_type) for r in b.returns]
    if ra != rb:
        return f"returns ({', '.join(ra)}) vs ({', '.join(rb)})"
    return None


# --------------------------------------------------------------------------- Python side

_PY_TYPES: dict[str, Any] = {
    "Tensor": Tensor,
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "number": torch.types.Number,
    "ScalarType": torch.dtype,
    "Device": torch.device,
    "Layout": torch.layout,
    "MemoryFormat": torch.memory_format,
}


def _py_type(t: str) -> Any:
    """The annotation for a JIT type string such as ``Optional[List[int]]`` (from ``Argument.real_type``)."""
    if t.startswith("Optional[") and t.endswith("]"):
        return typing.Optional[_py_type(t[len("Optional["):-1])]
    if t.startswith("List[") and t.endswith("]"):
        return list[_py_type(t[len("List["):-1])]  # type: ignore[misc]
    if t.startswith("Tuple[") and t.endswith("]"):
        return tuple[tuple(_py_type(e) for e in _split_types(t[len("Tuple["):-1]))]  # type: ignore[misc]
    return _PY_TYPES.get(t, typing.Any)


def _split_types(text: str) -> list[str]:
    """``"Tensor, List[int]"`` -> ``["Tensor", "List[int]"]`` (commas inside brackets kept)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c == "["
        depth -= c == "]"
        if c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _dtype_from_code(code: int) -> Any:
    """The dtype the schema parser stores as ``code`` (it keeps ScalarType defaults as enum ints)."""
    if not _DTYPE_CODES:
        for d in vars(torch).values():
            if isinstance(d, torch.dtype) and d not in _DTYPE_CODES.values():
                try:
                    arg = torch._C.parse_schema(f"x::f(ScalarType d={default_text(d, 'ScalarType')}) -> ()").arguments[0]
                except (RuntimeError, SchemaProblem):
                    continue
                if isinstance(arg.default_value, int):
                    _DTYPE_CODES[arg.default_value] = d
    return _DTYPE_CODES.get(code, code)


_DTYPE_CODES: dict[int, torch.dtype] = {}


def _py_default(arg: torch._C.Argument) -> Any:
    value = arg.default_value
    t = str(arg.real_type)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if "ScalarType" in t:
            return _dtype_from_code(value)
        if "Layout" in t:
            return torch.strided
        if "MemoryFormat" in t:
            return torch.contiguous_format
    if isinstance(value, list):
        return tuple(value)
    return value


def python_signature(schema: torch._C.FunctionSchema) -> inspect.Signature:
    """An ``inspect.Signature`` for the op, used for ``inspect.signature(MyOp)`` and the call function."""
    params = []
    for a in schema.arguments:
        kind = inspect.Parameter.KEYWORD_ONLY if a.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = _py_default(a) if a.has_default_value() else inspect.Parameter.empty
        params.append(inspect.Parameter(a.name, kind, default=default, annotation=_py_type(str(a.real_type))))
    returns = [_py_type(str(r.real_type)) for r in schema.returns]
    ret: Any = None if not returns else returns[0] if len(returns) == 1 else tuple[tuple(returns)]  # type: ignore[misc]
    return inspect.Signature(params, return_annotation=ret)


def annotation_problem(fn: Any, schema: torch._C.FunctionSchema) -> str | None:
    """For a hook annotated only in part: what it does annotate must agree with the schema."""
    try:
        annotations = resolve_annotations(fn)
        arguments = {a.name: a for a in schema.arguments}
        for name, ann in annotations.items():
            if name in arguments:
                got = param_type(ann)
                if str(parse("opclass::check", f"({got} a) -> ()").arguments[0].real_type) != str(arguments[name].real_type):
                    return f"parameter {name!r} is annotated {got}, but the op's schema says {arguments[name].real_type}"
        if "return" in annotations:
            got = return_type(annotations["return"])
            if [str(r.real_type) for r in parse("opclass::check", f"() -> {got}").returns] != [str(r.real_type) for r in schema.returns]:
                return f"the return is annotated {got}, but the op returns {str(schema).rpartition(' -> ')[2]}"
    except SchemaProblem as e:
        return e.problem
    return None


def fully_annotated(fn: Any) -> bool:
    """Every parameter and the return annotated: the hook's annotations alone give a schema."""
    annotations = getattr(fn, "__annotations__", None) or {}
    return "return" in annotations and all(name in annotations for name in _memo.signature(fn).parameters)


def kernel_signature_problem(fn: Any, schema: torch._C.FunctionSchema) -> str | None:
    """Why an unannotated kernel cannot take the op's arguments, or ``None`` if it can."""
    try:
        sig = _memo.signature(fn)
    except (TypeError, ValueError):
        return None
    ps = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps):
        return None
    names = [p.name for p in ps]
    expected = [a.name for a in schema.arguments]
    if names != expected:
        return f"its parameters ({', '.join(names)}) do not match the op's ({', '.join(expected)})"
    for p, a in zip(ps, schema.arguments):
        if a.kwarg_only != (p.kind is p.KEYWORD_ONLY):
            return f"parameter {p.name!r} must {'' if a.kwarg_only else 'not '}be keyword-only"
        # The dispatcher drops arguments equal to their default before calling a Python kernel.
        if a.has_default_value() and p.default is p.empty:
            return f"parameter {p.name!r} needs a default (the schema gives {a.name}={a.default_value!r})"
    return None


def dedupe(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` in order, without repeats."""
    return tuple(dict.fromkeys(names))
