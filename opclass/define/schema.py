"""The op schema: derived from annotations, parsed, compared, and the Python signature it gives.

Example:
    >>> import torch
    >>> from opclass.define.schema import derive
    >>> def kernel(x: torch.Tensor, k: float = 2.0) -> torch.Tensor: ...
    >>> derive(kernel, (), ())
    '(Tensor x, float k=2.0) -> Tensor'
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import typing
from typing import Any, Mapping, Sequence

import torch
from torch import _C

from opclass.core import memo
from opclass.core.compat import tagged_inplace, tagged_out
from opclass.core.types import BY_JIT, jit_type, returns_of
from opclass.define.annotations import SchemaProblem, default_text, param_type, resolve_annotations, return_type
from opclass.define.arguments import Arguments


def derive(fn: Any, mutates_args: Sequence[str], tags: Sequence[torch.Tag]) -> str:
    """The schema string ``(Tensor x, ...) -> Tensor`` for a kernel's annotated signature."""
    annotations = resolve_annotations(fn)
    sig = memo.signature(fn)
    params = []
    positional: list[tuple[int, str, str]] = []  # (index, name, type) of positional params
    out_names: list[str] = []
    for idx, (name, p) in enumerate(sig.parameters.items()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            kind = {p.VAR_POSITIONAL: "*args", p.VAR_KEYWORD: "**kwargs", p.POSITIONAL_ONLY: "positional-only parameters"}[p.kind]
            raise SchemaProblem(f"{kind} have no schema form", "list every parameter by name")
        if name not in annotations:
            receiver = receiver_problem(sig) if idx == 0 else None  # a method's self, cls or ctx
            raise SchemaProblem(*(receiver or (f"parameter {name!r} has no annotation", f"annotate it, e.g. {suggest_annotation(name, p.default)}")))
        try:
            ptype = param_type(annotations[name])
        except SchemaProblem as e:
            raise SchemaProblem(f"parameter {name!r}: {e.problem}", e.fix) from None
        if p.kind is p.KEYWORD_ONLY and "*" not in params:
            params.append("*")
        text = ptype
        if name in mutates_args:
            if not ptype.startswith("Tensor"):
                raise SchemaProblem(f"mutates_args names {name!r}, which is {ptype}, not a Tensor", f"remove {name!r} from mutates_args")
            text = f"Tensor(a{idx}!){ptype[len('Tensor'):]}"
            if tagged_out(tags):
                if p.kind is not p.KEYWORD_ONLY or ptype != "Tensor":
                    raise SchemaProblem(f"Tag.out needs {name!r} to be a keyword-only Tensor", f"write it after '*' as {name}: Tensor")
                out_names.append(name)
        if p.kind is not p.KEYWORD_ONLY:
            positional.append((idx, name, ptype))
        if p.default is not p.empty and dataclasses.is_dataclass(annotations[name]):
            raise SchemaProblem(f"config parameter {name!r} has a default, which a schema cannot hold", f"drop the default; callers pass {name} explicitly")
        text += f" {name}"
        if p.default is not p.empty:
            try:
                text += f"={default_text(p.default, ptype)}"
            except SchemaProblem as e:
                raise SchemaProblem(f"parameter {name!r}: {e.problem}", e.fix) from None
        params.append(text)
    if "return" not in annotations:
        raise SchemaProblem("the return has no annotation", "annotate it, e.g. -> Tensor, or -> None")
    names = list(sig.parameters)

    def alias(name: str) -> str:
        if name not in names or not param_type(annotations.get(name, type(None))).startswith("Tensor"):
            raise SchemaProblem(f"the return is annotated opclass.Alias({name!r}), and {name!r} is no Tensor parameter", f"name one of {', '.join(names)}")
        if name not in mutates_args:  # a view of the argument: said so on both sides (and refused as views are)
            i = next(i for i, p in enumerate(params) if p.split(" ")[-1].partition("=")[0] == name)
            params[i] = params[i].replace("Tensor", f"Tensor(a{names.index(name)})", 1)
        return f"Tensor(a{names.index(name)}{'!' if name in mutates_args else ''})"

    ret = return_type(annotations["return"], alias)
    if (tagged_inplace(tags) or tagged_out(tags)) and "(a" in ret:
        raise SchemaProblem("Tag.inplace and Tag.out say what the op returns already", "annotate the return as a plain Tensor")
    if tagged_inplace(tags):
        if not positional or positional[0][2] != "Tensor" or set(mutates_args) != {positional[0][1]}:
            raise SchemaProblem("Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", "set mutates_args=(first parameter name,)")
        if ret != "Tensor":
            raise SchemaProblem("Tag.inplace needs the return annotation -> Tensor", "return the mutated first argument, annotated -> Tensor")
        ret = f"Tensor(a{positional[0][0]}!)"
    if tagged_out(tags):
        if not out_names:
            raise SchemaProblem("Tag.out needs at least one keyword-only Tensor in mutates_args", "add e.g. *, out: Tensor and mutates_args=('out',)")
        expected = "Tensor" if len(out_names) == 1 else "(" + ", ".join(["Tensor"] * len(out_names)) + ")"
        if ret != expected:
            raise SchemaProblem(f"Tag.out needs the return annotation to match the out arguments {tuple(out_names)}", f"annotate the return as {expected.replace('(', 'tuple[').replace(')', ']')}")
        aliases = [f"Tensor(a{list(sig.parameters).index(n)}!)" for n in out_names]
        ret = aliases[0] if len(aliases) == 1 else "(" + ", ".join(aliases) + ")"
    return "(" + ", ".join(params) + ") -> " + ret


def tensor_parameters(fn: Any) -> tuple[str, ...]:
    """The parameters annotated with a Tensor type (what ``mutates_args="unknown"`` marks mutated)."""
    found = []
    for name, ann in resolve_annotations(fn).items():
        with contextlib.suppress(SchemaProblem):  # derive() reports it
            if name != "return" and param_type(ann).startswith("Tensor"):
                found.append(name)
    return tuple(found)


def tag_problem(schema: torch._C.FunctionSchema, tags: Sequence[torch.Tag]) -> tuple[str, str] | None:
    """``(problem, fix)`` when an explicit schema breaks the rules of ``Tag.inplace``/``Tag.out``
    (the same rules :func:`derive` applies to annotations)."""
    table, returns = Arguments.of(schema), list(schema.returns)
    written = table.written

    def aliases(x: Any) -> set[str]:
        return set(x.alias_info.before_set) if x.alias_info is not None else set()

    if tagged_inplace(tags):
        first = table.positional[0] if table.positional else None
        if first is None or first.jit != "Tensor" or written != (first,):
            return "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", "write e.g. schema='(Tensor(a!) x, float k) -> Tensor(a!)'"
        if returns_of(schema) != ("Tensor",) or aliases(returns[0]) != aliases(schema.arguments[0]):
            return "Tag.inplace needs the op to return its first argument", "end the schema with -> Tensor(a!), the first argument's alias"
    if tagged_out(tags):
        if not written or any(not a.keyword_only or a.jit != "Tensor" for a in written):
            return "Tag.out needs the mutated arguments to be keyword-only Tensors", "write e.g. schema='(Tensor x, *, Tensor(a!) out) -> Tensor(a!)'"
        if len(returns) != len(written) or any(aliases(r) != aliases(schema.arguments[a.index]) for r, a in zip(returns, written)):
            return "Tag.out needs the op to return its out arguments, in order", "write the returns as their aliases, e.g. -> (Tensor(a!), Tensor(b!))"
    return None


def parse(qualname: str, schema: str) -> torch._C.FunctionSchema:
    """Parse ``(args) -> ret`` for the op ``ns::name[.overload]``."""
    return torch._C.parse_schema(qualname + schema)


def describe_difference(a: torch._C.FunctionSchema, b: torch._C.FunctionSchema) -> str | None:
    """The first way two schemas differ, in words; ``None`` if they are the same."""
    first, second = Arguments.of(a), Arguments.of(b)
    if len(first) != len(second):
        return f"{len(first)} vs {len(second)} parameters"
    for x, y in zip(first, second):
        if x.name != y.name:
            return f"parameter {x.name!r} vs {y.name!r}"
        if x.jit != y.jit:
            return f"parameter {x.name!r} is {x.jit} vs {y.jit}"
        if x.keyword_only != y.keyword_only:
            return f"parameter {x.name!r} is keyword-only in one only"
        if x.schema_default != y.schema_default:
            dx, dy = (v.schema_default if v.has_default else "no default" for v in (x, y))
            return f"parameter {x.name!r} default {dx!r} vs {dy!r}"
    if returns_of(a) != returns_of(b):
        return f"returns ({', '.join(returns_of(a))}) vs ({', '.join(returns_of(b))})"
    return None


def _py_type(t: str) -> Any:
    """The annotation for a JIT type string such as ``Optional[List[int]]`` (from ``Argument.real_type``)."""
    optional, element, items = jit_type(t)[:3]
    if optional is not None:
        return typing.Optional[_py_type(optional)]
    if element is not None:
        return list[_py_type(element)]  # type: ignore[misc]
    if items is not None:
        return tuple[tuple(_py_type(e) for e in items)]  # type: ignore[misc]
    row = BY_JIT.get(t)
    return row.annotation if row is not None else typing.Any


def python_signature(arguments: Arguments, schema: torch._C.FunctionSchema) -> inspect.Signature:
    """An ``inspect.Signature`` for the op, used for ``inspect.signature(MyOp)`` and the call function."""
    params = [
        inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY if a.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD, default=a.default, annotation=_py_type(a.jit))
        for a in arguments
    ]
    returns = [_py_type(r) for r in returns_of(schema)]
    ret: Any = None if not returns else returns[0] if len(returns) == 1 else tuple[tuple(returns)]  # type: ignore[misc]
    return inspect.Signature(params, return_annotation=ret)


def annotation_problem(fn: Any, schema: torch._C.FunctionSchema) -> str | None:
    """For a hook annotated only in part: what it does annotate must agree with the schema."""
    try:
        annotations = resolve_annotations(fn)
        table = Arguments.of(schema)
        for name, ann in annotations.items():
            if name in table.names:
                got = param_type(ann)
                if Arguments.of(parse("opclass::check", f"({got} a) -> ()"))[0].jit != table[name].jit:
                    return f"parameter {name!r} is annotated {got}, but the op's schema says {table[name].jit}"
        if "return" in annotations:
            got = return_type(annotations["return"])
            if returns_of(parse("opclass::check", f"() -> {got}")) != returns_of(schema):
                return f"the return is annotated {got}, but the op returns {str(schema).rpartition(' -> ')[2]}"
    except SchemaProblem as e:
        return e.problem
    return None


def annotated(fn: Any) -> bool:
    """Some parameter of ``fn``, or its return, is annotated."""
    return bool(getattr(fn, "__annotations__", None))


def annotated_kernels(kernels: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The names of the kernels that are :func:`annotated`, and of those fully annotated (every
    parameter and the return: the annotations alone give a schema)."""
    some = {h: fn.__annotations__ for h, fn in kernels.items() if annotated(fn)}
    return list(some), [h for h, a in some.items() if "return" in a and a.keys() >= memo.signature(kernels[h]).parameters.keys()]


def receiver_problem(sig: inspect.Signature) -> tuple[str, str] | None:
    """``(problem, fix)`` when a kernel's first parameter is ``self``, ``cls`` or ``ctx`` (a
    method's habit, or autograd.Function's) and no argument of the op."""
    first = next(iter(sig.parameters), None)
    if first not in ("self", "cls", "ctx"):
        return None
    where = "setup_context and backward take ctx; a kernel takes only the op's arguments" if first == "ctx" else "hooks are static methods of the op's arguments, with no self or cls"
    rest = ", ".join(str(p) for p in list(sig.parameters.values())[1:])
    return f"its first parameter is {first!r}, which is no argument of the op: {where}", f"drop {first!r}, keeping @staticmethod: ({rest})"


def suggest_annotation(name: str, default: Any) -> str:
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
        # As the user would write it: torch.float32, torch.device('cpu').
        return f"{name}: torch.{kind.__name__} = {repr(default) if isinstance(default, torch.device) else default}"
    if isinstance(default, (tuple, list)) and default and all(type(v) is type(default[0]) and type(v) in (bool, int, float) for v in default):
        return f"{name}: Sequence[{type(default[0]).__name__}] = {default!r}"
    return f"{name}: <its type> = {default!r}"


def kernel_signature_problem(fn: Any, table: Arguments) -> str | None:
    """Why an unannotated kernel cannot take the op's arguments, or ``None`` if it can."""
    try:
        sig = memo.signature(fn)
    except (TypeError, ValueError):
        return None
    ps = list(sig.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in ps):
        return None
    expected = table.names
    # A positional-only parameter is matched by position: callers never pass it by name.
    names = [expected[i] if p.kind is p.POSITIONAL_ONLY and i < len(expected) and not table[i].keyword_only else p.name for i, p in enumerate(ps)]
    if names[:1] != expected[:1] and (receiver := receiver_problem(sig)) is not None:
        return receiver[0]
    if names != expected:
        return f"its parameters ({', '.join(p.name for p in ps)}) do not match the op's ({', '.join(expected)})"
    for p, a in zip(ps, table):
        if a.keyword_only != (p.kind is p.KEYWORD_ONLY) and p.kind is not p.POSITIONAL_ONLY:
            return f"parameter {p.name!r} must {'' if a.keyword_only else 'not '}be keyword-only"
    return missing_default(fn, table)


def positional_only_fix(fn: Any, table: Arguments) -> str:
    """The other fix for a kernel whose positional parameters have names of its own: make them
    positional-only (callers never pass them by name); ``""`` where that is no fix."""
    try:
        params = [p for p in memo.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return ""
    if len(params) != len(table.positional) or [p.name for p in params] == [a.name for a in table.positional] or any(p.kind is p.POSITIONAL_ONLY for p in params):
        return ""
    return f", or keep its names and make them positional-only: ({', '.join(str(p) for p in params)}, /)"


def missing_default(fn: Any, table: Arguments, skip: int = 0) -> str | None:
    """Why ``fn``, which takes the op's arguments after its first ``skip`` parameters, fails when
    a caller leaves out an argument with a default, or ``None``."""
    try:
        ps = list(memo.signature(fn).parameters.values())[skip:]
    except (TypeError, ValueError):
        return None
    positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = {p.name: p for p in ps if p.kind is p.KEYWORD_ONLY}
    # The dispatcher drops arguments equal to their default before calling a Python kernel.
    mine = [(a, positional[i] if i < len(positional) else None) for i, a in enumerate(table.positional)]
    mine += [(a, keyword.get(a.name)) for a in table.keyword_only]
    for a, p in mine:
        if a.has_default and p is not None and p.default is p.empty:
            return f"parameter {p.name!r} needs a default (the schema gives {a.name}={a.schema_default!r})"
    return None


def find_schema(qualname: str) -> torch._C.FunctionSchema | None:
    """The dispatcher's schema of ``ns::name[.overload]``, or ``None`` if no such op is defined."""
    name, _, overload = qualname.partition(".")
    if not op_exists(name, overload):
        return None
    return next((s for s in _C._jit_get_schemas_for_operator(name) if s.overload_name == overload), None)


def op_exists(name: str, overload: str | None = None) -> bool:
    """The dispatcher has the op ``ns::name`` with ``overload`` (``""``: the default one); with no
    ``overload``, ``name`` is ``ns::name[.overload]``."""
    if overload is None:
        name, _, overload = name.partition(".")
    try:
        _C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError:
        return False
    return True


def schema_text(schema: torch._C.FunctionSchema) -> str:
    """``(args) -> returns``: the schema without its name, as ``OpSpec.schema_str`` holds it."""
    return "(" + str(schema).partition("(")[2]


def op_tags(qualname: str) -> tuple[torch.Tag, ...]:
    """The tags of the op ``ns::name[.overload]`` defined elsewhere (none if it cannot be found)."""
    ns, _, rest = qualname.partition("::")
    name, _, overload = rest.partition(".")
    try:
        return tuple(getattr(getattr(getattr(torch.ops, ns), name), overload or "default").tags)
    except (AttributeError, RuntimeError):
        return ()
