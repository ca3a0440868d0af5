"""mypy plugin: calling an op class is type-checked against the op's signature.

Enable it with ``plugins = opclass.mypy`` in ``mypy.ini`` (or ``[tool.mypy]``). mypy ignores a
metaclass ``__call__`` (python/mypy#8595) and would see ``MyOp(x)`` as ``CustomOp.__new__`` (any
arguments, result ``Any``): the plugin gives every ``CustomOp`` subclass a ``__new__`` with the
op's signature, taken where the runtime takes it (an annotated kernel, the class's own first,
else ``schema=``, else the inherited one), kept in mypy's cache like any method. Calling an
abstract op base (no kernel) is an error, as at runtime, and so is an ``add_provider`` function
that leaves out a parameter of the op or its default.

Example:
    >>> from opclass.mypy import plugin
    >>> plugin("1.10").__name__
    'OpclassPlugin'
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from mypy.errorcodes import ARG_TYPE, CALL_ARG
from mypy.nodes import ARG_NAMED, ARG_NAMED_OPT, ARG_OPT, ARG_POS, Argument, BytesExpr, ComplexExpr, Decorator, EllipsisExpr, FloatExpr, IntExpr, NameExpr
from mypy.nodes import CallExpr, RefExpr, StrExpr, TypeInfo, Var
from mypy.messages import pretty_callable
from mypy.plugin import ClassDefContext, FunctionContext, FunctionSigContext, Plugin, SemanticAnalyzerPluginInterface
from mypy.plugins.common import add_method_to_class
from mypy.semanal_shared import has_placeholder
from mypy.subtypes import is_subtype
from mypy.types import AnyType, CallableType, FunctionLike, NoneType, TupleType, Type, TypeOfAny, TypeType, UnionType, get_proper_type
from mypy.typevars import fill_typevars

from opclass.core.names import CLASS_KEYWORDS, HOOK_KINDS

__all__ = ["plugin", "OpclassPlugin"]

_CUSTOM_OP = "opclass._op.CustomOp"
_STYLE = ("opclass.style", "opclass.define.conventions.style", "opclass._public.style")
_META = "opclass"  # key in TypeInfo.metadata, which mypy's cache keeps
# Built-in kernel hooks, in the order the signature is looked for (all must agree at runtime).
_KERNELS = tuple(name for name, kind in HOOK_KINDS.items() if kind in ("backend", "kernel"))
_BACKENDS = frozenset(name for name, kind in HOOK_KINDS.items() if kind == "backend")
# Literal expressions that cannot be a str keyword, and the type mypy would name.
_NOT_STR: dict[type, str] = {IntExpr: "int", FloatExpr: "float", BytesExpr: "bytes", ComplexExpr: "complex"}
# A parameter's mypy kind by (keyword-only, has a default).
_KINDS = {(False, False): ARG_POS, (False, True): ARG_OPT, (True, False): ARG_NAMED, (True, True): ARG_NAMED_OPT}


class OpclassPlugin(Plugin):
    """Gives each ``CustomOp`` subclass the op's call signature (see the module docstring).

    Example:
        >>> import mypy.plugin
        >>> issubclass(OpclassPlugin, mypy.plugin.Plugin)
        True
    """

    def get_base_class_hook(self, fullname: str) -> Callable[[ClassDefContext], None] | None:
        info = self._info(fullname)
        return _add_signature if info is not None and (info.fullname == _CUSTOM_OP or info.has_base(_CUSTOM_OP)) else None

    def get_function_signature_hook(self, fullname: str) -> Callable[[FunctionSigContext], FunctionLike] | None:
        info = self._info(fullname)
        return _abstract_call if info is not None and (info.fullname == _CUSTOM_OP or info.metadata.get(_META, {}).get("abstract")) else None

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        return _check_provider if fullname == "opclass.providers.add_provider" else None

    def _info(self, fullname: str) -> TypeInfo | None:
        sym = self.lookup_fully_qualified(fullname)
        return sym.node if sym is not None and isinstance(sym.node, TypeInfo) else None


def plugin(version: str) -> type[Plugin]:
    """The entry point mypy calls (``plugins = opclass.mypy``).

    Example:
        >>> plugin("2.4") is OpclassPlugin
        True
    """
    return OpclassPlugin


def _add_signature(ctx: ClassDefContext) -> None:
    _check_keywords(ctx)
    info = ctx.cls.info
    schema = ctx.cls.keywords.get("schema")
    own_schema = schema.value if isinstance(schema, StrExpr) else None
    # existing=True: the op is defined elsewhere, so a class with no kernel (abstract, a formula) is an op.
    existing = ctx.cls.keywords.get("existing")
    extends = isinstance(existing, NameExpr) and existing.fullname == "builtins.True"
    info.metadata[_META] = {"abstract": _is_abstract(info) and not extends, "schema": own_schema}
    sig = _kernel_signature(info)
    if sig is None and own_schema is not None:
        sig = _schema_signature(ctx.api, own_schema)
    if sig is None:
        return  # inherited __new__: the base op's signature, or CustomOp's (Any)
    if has_placeholder(sig) and not ctx.api.final_iteration:
        ctx.api.defer()  # a forward reference in the annotations: wait for it to resolve
        return
    args = [
        Argument(Var(name or f"__arg{i}", typ), typ, EllipsisExpr() if kind.is_optional() else None, kind)
        for i, (name, typ, kind) in enumerate(zip(sig.arg_names, sig.arg_types, sig.arg_kinds))
    ]
    given = ctx.cls.keywords.get("out")
    if isinstance(given, NameExpr) and given.fullname == "builtins.True":
        # MyOp(x, out=buf): one optional keyword per output, named as the .out overload names them.
        ret = get_proper_type(sig.ret_type)
        outputs = ret.items if isinstance(ret, TupleType) else [sig.ret_type]
        names = ["out"] if len(outputs) == 1 else [f"out{i}" for i in range(len(outputs))]
        args += [Argument(Var(n, UnionType([t, NoneType()])), UnionType([t, NoneType()]), EllipsisExpr(), ARG_NAMED_OPT) for n, t in zip(names, outputs)]
    new = add_method_to_class(ctx.api, ctx.cls, "__new__", args, sig.ret_type, self_type=TypeType(fill_typevars(info)))
    # Kept in the class's symbol table (and so in mypy's cache), but out of the body the checker
    # visits: it would insist that __new__ returns an instance of the class.
    ctx.cls.defs.body.remove(new)


def _check_keywords(ctx: ClassDefContext) -> None:
    """mypy skips checking class keywords against ``__init_subclass__`` when the class has a
    custom metaclass (it cannot know what the metaclass consumes); ours consumes none."""
    for key, expr in ctx.cls.keywords.items():
        if key not in CLASS_KEYWORDS and key != "metaclass":
            ctx.api.fail(f'Unexpected keyword argument "{key}" for "__init_subclass__" of "CustomOp"', expr, code=CALL_ARG)
        elif key in ("existing", "name", "namespace", "schema") and (type(expr) in _NOT_STR or (key == "existing" and isinstance(expr, StrExpr))):
            found = "str" if isinstance(expr, StrExpr) else _NOT_STR[type(expr)]
            expected = "bool | None" if key == "existing" else "str | None"
            ctx.api.fail(f'Argument "{key}" to "__init_subclass__" of "CustomOp" has incompatible type "{found}"; expected "{expected}"', expr, code=ARG_TYPE)


def _kernel_signature(info: TypeInfo) -> CallableType | None:
    """The first annotated kernel in the class or its op bases (the runtime requires them to
    agree): a kernel hook's, else another public static method's (a provider, a third party's
    device kernel)."""
    for klass in info.mro:
        if klass.fullname == _CUSTOM_OP:
            break
        for hook in [*_KERNELS, *(n for n in klass.names if not n.startswith("_") and n not in HOOK_KINDS)]:
            sym = klass.names.get(hook)
            node = sym.node if sym is not None else None
            if isinstance(node, Decorator) and node.func.is_static and isinstance(node.func.type, CallableType) and not _styled(node):
                return node.func.type
    return None


def _styled(node: Decorator) -> bool:
    """``@opclass.style("out")`` (or ``"inplace"``): the kernel takes another overload's parameters."""
    for d in node.decorators:
        if isinstance(d, CallExpr) and isinstance(d.callee, RefExpr) and d.callee.fullname in _STYLE and not (d.args and isinstance(d.args[0], StrExpr) and d.args[0].value == "functional"):
            return True
    return False


def _is_abstract(info: TypeInfo) -> bool:
    """No kernel anywhere in the MRO. A public static method that is no known hook could be a
    third-party device kernel (``opclass.device_hook``), so such a class is not called abstract."""
    for klass in info.mro:
        if klass.fullname == _CUSTOM_OP:
            return True
        for name, sym in klass.names.items():
            if name in _BACKENDS or (isinstance(sym.node, Decorator) and sym.node.func.is_static and not name.startswith("_") and name not in HOOK_KINDS):
                return False
    return True


def _abstract_call(ctx: FunctionSigContext) -> FunctionLike:
    name = ctx.default_signature.name or "CustomOp"
    message = f'"{name}" is an abstract op base (it defines no kernel such as cpu, cuda or default); subclass it and define a kernel to make an op'
    ctx.api.fail(message, ctx.context)
    return ctx.default_signature


def _check_provider(ctx: FunctionContext) -> Type:
    """``add_provider(Op, name, fn)``: ``Callable[P, R]`` checks that the op takes what ``fn`` takes,
    not the reverse, so ``fn`` could leave out a parameter of the op or its default, which the
    runtime refuses. (Parameters ``fn`` takes positional-only may have other names, as at runtime.)"""
    op, fn = (get_proper_type(t[0]) if t else None for t in (ctx.arg_types[0], ctx.arg_types[2]))
    if isinstance(op, CallableType) and op.is_type_obj() and isinstance(fn, CallableType):
        untyped = AnyType(TypeOfAny.special_form)
        names = [None if k.is_positional() and fn.arg_names[i : i + 1] == [None] else n for i, (n, k) in enumerate(zip(op.arg_names, op.arg_kinds))]
        want, got = (c.copy_modified(arg_types=[untyped] * len(c.arg_types), ret_type=untyped, fallback=fn.fallback) for c in (op.copy_modified(arg_names=names), fn))
        if is_subtype(want, got) and not is_subtype(got, want):  # the other way round is mypy's own error
            name, ops = next((a.value for a in ctx.args[1] if isinstance(a, StrExpr)), "fn"), pretty_callable(op.copy_modified(fallback=fn.fallback), ctx.api.options)
            problem = f'Provider "{name}" for "{op.type_object().name}" takes "{pretty_callable(fn, ctx.api.options)}"'
            ctx.api.fail(f'{problem}; a provider takes every parameter of the op, by name, with its default: "{ops}"', ctx.context, code=ARG_TYPE)
    return ctx.default_return_type


def _schema_signature(api: SemanticAnalyzerPluginInterface, text: str) -> CallableType | None:
    from opclass.define import schema as _schema  # imports torch; only classes with schema= and no annotations need it
    from opclass.define.arguments import Arguments

    try:
        parsed = _schema.parse("opclass_mypy::op", text)
        sig = _schema.python_signature(Arguments.of(parsed), parsed)
    except Exception:
        return None  # the runtime reports the bad schema; the call stays unchecked
    params = sig.parameters.values()
    kinds = [_KINDS[p.kind is p.KEYWORD_ONLY, p.default is not p.empty] for p in params]
    types = [_mypy_type(api, p.annotation) for p in params]
    return CallableType(types, kinds, list(sig.parameters), _mypy_type(api, sig.return_annotation), api.named_type("builtins.function"))


def _mypy_type(api: SemanticAnalyzerPluginInterface, ann: Any) -> Type:
    """A mypy type for an annotation from ``_schema.python_signature`` (``Any`` if unknown)."""
    if ann is None:
        return NoneType()
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union:
        return UnionType([_mypy_type(api, a) for a in args])
    if origin is tuple:
        return TupleType([_mypy_type(api, a) for a in args], api.named_type("builtins.tuple", [AnyType(TypeOfAny.special_form)]))
    if origin is list:
        return api.named_type("builtins.list", [_mypy_type(api, args[0])])
    found = api.named_type_or_none(f"{ann.__module__}.{ann.__qualname__}".replace("torch.Tensor", "torch._tensor.Tensor")) if isinstance(ann, type) else None
    return found if found is not None else AnyType(TypeOfAny.special_form)
