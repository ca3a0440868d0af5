"""Per-class generated call functions: source built once, compiled, and visible to ``inspect``/tracebacks."""

from __future__ import annotations

import inspect
import itertools
import linecache
import weakref
from typing import Any, Callable

from . import _dynamo_call, _native, _record
from ._fastpath import c_entry, fast_source, functorch_lines, python_signature
from ._record import OpRecord
from ._shield import shield

_COUNTER = itertools.count()


def compile_function(name: str, source: str, closure: dict[str, Any], filename_hint: str) -> Callable[..., Any]:
    """Compile ``source`` (one ``def name``) with ``closure`` as its free variables.

    The source is registered in :mod:`linecache` under a unique, readable filename, so
    tracebacks and ``inspect.getsource`` show the generated code (as attrs does).
    """
    filename = f"<opclass generated {filename_hint} #{next(_COUNTER)}>"
    args = ", ".join(closure)
    body = "\n".join("    " + line for line in source.splitlines())
    outer = f"def __create_fn__({args}):\n{body}\n    return {name}\n"
    code = compile(outer, filename, "exec", dont_inherit=True)
    namespace: dict[str, Any] = {}
    exec(code, {"__builtins__": __builtins__}, namespace)  # noqa: S102 - our own generated source
    fn: Callable[..., Any] = namespace["__create_fn__"](**closure)
    linecache.cache[filename] = (len(outer), None, outer.splitlines(keepends=True), filename)
    shield(fn)  # run eagerly (after a graph break), the call is not torch.compile's to trace
    # Redefined and removed ops drop their function; their source goes with it.
    weakref.finalize(fn, linecache.cache.pop, filename, None)
    return fn


def call_source(record: OpRecord, name: str, as_new: bool = False) -> tuple[str, dict[str, Any]]:
    """Source of the op's call function with its exact parameter list (``as_new``: the class's
    ``__new__``, see :func:`~opclass._fastpath.python_signature`), and the closure it needs."""
    closure: dict[str, Any] = {"_op": record.op}
    if any(a.name.startswith("_") for a in record.schema.arguments):
        # A parameter could shadow a generated name (_op...): take everything as given.
        given = "_cls, /, *args, **kwargs" if as_new else "*args, **kwargs"
        return f"def {name}({given}):\n    return _op(*args, **kwargs)\n", closure
    if as_new:
        names = list(record.signature.parameters)
        call_args = ", ".join(n if record.signature.parameters[n].kind is not inspect.Parameter.KEYWORD_ONLY else f"{n}={n}" for n in names)
        signature, head, tail = python_signature(record, closure, call_args)
        return "\n".join([f"def {name}({signature}):", *head, *functorch_lines(record, closure, call_args), *tail]) + "\n", closure
    params: list[str] = []
    positional: list[str] = []
    keywords: list[str] = []
    star = False
    for p in record.signature.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        text = p.name
        if p.default is not p.empty:
            closure[f"_default_{p.name}"] = p.default
            text += f"=_default_{p.name}"
        params.append(text)
        (keywords if p.kind is p.KEYWORD_ONLY else positional).append(p.name)
    call_args = ", ".join(positional + [f"{k}={k}" for k in keywords])
    lines = [f"def {name}({', '.join(params)}):", *functorch_lines(record, closure, call_args), f"    return _op({call_args})"]
    return "\n".join(lines) + "\n", closure



def install_call(record: OpRecord, cls: Any) -> None:
    """Give ``cls`` its call: a stand-in that generates the real one on the op's first call.

    Libraries define hundreds of ops at import and call a few, so the code is generated (and
    compiled) when first needed, not at definition: everything that can be wrong with a
    definition was checked before this point, and generating from a valid record does not fail.
    """
    _native.build_in_background()
    cls._opclass_op = record.op
    _dynamo_call.watch(type(cls))  # OpMeta is watched already; a metaclass derived from it is not
    cls._opclass_fast = None
    as_new = not _native.CALL_IS_NATIVE

    def first_call(*args: Any, **kwargs: Any) -> Any:
        if as_new:
            args = args[1:]  # the class, as __new__'s first argument
        if cls.__dict__.get("_opclass_call") is first_call:
            with _record.LOCK:
                if cls.__dict__.get("_opclass_call") is first_call:
                    build_call(record, cls)
        return cls(*args, **kwargs)

    first_call.__opclass_new__ = as_new  # type: ignore[attr-defined]
    first_call.__opclass_stand_in__ = True  # type: ignore[attr-defined]
    first_call.__qualname__ = f"{cls.__qualname__}.{'__new__' if as_new else '__call__'}"
    cls._opclass_call = shield(first_call)


def build_call(record: OpRecord, cls: Any) -> None:
    """Generate and install ``cls``'s call: the guarded function, the C entry for simple ops.

    Where ``OpMeta`` has no C call (the native guard was not loaded at import), the function is
    the class's ``__new__``: ``OpMeta.__setattr__`` installs it when ``_opclass_call`` is set.
    """
    as_new = not _native.CALL_IS_NATIVE
    generated = fast_source(record, cls.__name__, as_new=as_new)
    cls._opclass_call = make_call(record, cls, generated, as_new)
    # The C entry repeats the generated function's decisions, so only where one was generated.
    cls._opclass_fast = c_entry(record) if generated is not None else None
    native = _native.native_module()
    if native is not None:
        try:  # calls skip tp_call's argument tuple
            native.enable_vectorcall(type(cls), cls)
        except TypeError:
            pass  # a metaclass with a __call__ of its own keeps it


def call_function(cls: Any) -> Callable[..., Any]:
    """``cls``'s generated call function, generated now if the op was not called yet."""
    call = cls.__dict__["_opclass_call"]
    if getattr(call, "__opclass_stand_in__", False):
        record = cls.__dict__["_opclass_record"]
        with _record.LOCK:
            if cls.__dict__["_opclass_call"] is call:
                build_call(record, cls)
    result: Callable[..., Any] = cls.__dict__["_opclass_call"]
    return result


def make_call(record: OpRecord, cls: type, generated: tuple[str, dict[str, Any]] | None = None, as_new: bool = False) -> Callable[..., Any]:
    """The function ``MyOp(...)`` runs: the op's exact signature, guarded fast path included.

    ``generated``: ``fast_source(record, cls.__name__, as_new=as_new)`` when the caller has it already.
    """
    if generated is None:
        generated = fast_source(record, cls.__name__, as_new=as_new)
    source, closure = generated if generated is not None else call_source(record, cls.__name__, as_new)
    fn = compile_function(cls.__name__, source, closure, f"{record.qualname} {cls.__module__}.{cls.__qualname__}")
    fn.__qualname__ = f"{cls.__qualname__}.{'__new__' if as_new else '__call__'}"
    fn.__opclass_new__ = as_new  # type: ignore[attr-defined]
    fn.__module__ = cls.__module__
    fn.__doc__ = f"Call ``{record.qualname}{record.schema_str}``."
    fn.__signature__ = record.signature  # type: ignore[attr-defined]
    return fn


def python_guard_call(record: OpRecord, cls: type) -> Callable[..., Any] | None:
    """``cls``'s call function as the pure-Python guard writes it (``None``: no fast path)."""
    generated = fast_source(record, cls.__name__, python_guard=True)
    return make_call(record, cls, generated) if generated is not None else None
