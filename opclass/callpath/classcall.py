"""The class call: the only writer of an op class's call attributes.

* ``_opclass_record``: the install the class defines (``None``: an abstract base);
* ``_opclass_op``: its ``OpOverload`` (what torch.compile reads a class call as; ``None`` once
  the op is replaced or removed);
* ``_opclass_call``: the function ``MyOp(...)`` runs: a stand-in that generates the real one on
  the op's first call, then the generated function (:mod:`opclass.callpath.source`), shown by tracebacks;
* ``_opclass_fast``: the native class call's plain-eager entry for simple ops
  (:func:`~opclass.callpath.source.c_entry`).

Example:
    >>> import inspect, opclass
    >>> from opclass.callpath.classcall import call_function
    >>> class DocsCall(opclass.CustomOp, name="docs_call::f", schema="(Tensor x) -> Tensor"):
    ...     cpu = staticmethod(lambda x: x)
    >>> inspect.getsource(call_function(DocsCall)).split()[:2] in (["def", "DocsCall(x):"], ["def", "DocsCall(_cls,"])
    True
    >>> opclass.remove(DocsCall)
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import linecache
import weakref
from typing import Any, Callable, Optional

import torch

from opclass.callpath import dynamo
from opclass.callpath.source import c_entry, call_source
from opclass.core import native
from opclass.core.shield import shield
from opclass.define.spec import OpSpec
from opclass.install.record import LOCK, OpRecord, lookup

__all__ = ["arm", "retire", "make_abstract", "document", "call_function", "python_guard_call"]

_COUNTER = itertools.count()


def make_abstract(cls: Any) -> None:
    """``cls`` defines no op: calling it raises (see ``OpMeta``)."""
    cls._opclass_record = None
    cls._opclass_call = None


def document(cls: Any, spec: OpSpec) -> None:
    """``inspect.signature(cls)`` and the class's docstring say what the op takes."""
    sig = spec.signature
    if "out" in dict(spec.convention.siblings):  # MyOp(x, out=buf) calls the .out overload
        extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[torch.Tensor]) for n in spec.convention.outs]
        sig = sig.replace(parameters=[*sig.parameters.values(), *extra])
    cls.__signature__ = sig
    doc = (cls.__dict__.get("__doc__") or "").rstrip()
    cls.__doc__ = (doc + "\n\n" if doc else "") + f"Operator ``{spec.qualname}``: ``{spec.schema_str}``"


def arm(record: OpRecord, cls: Any) -> None:
    """Make ``cls`` call ``record``'s op: a stand-in that generates the real call on the first call
    (libraries define hundreds of ops at import and call a few; a valid record never fails to
    generate, as everything that can be wrong with a definition was checked before this point)."""
    cls._opclass_record = record
    cls._opclass_op = record.op
    dynamo.watch(type(cls))  # OpMeta is watched already; a metaclass derived from it is not
    cls._opclass_fast = None
    as_new = not native.CALL_IS_NATIVE

    def first_call(*args: Any, **kwargs: Any) -> Any:
        if as_new:
            args = args[1:]  # the class, as __new__'s first argument
        call_function(cls)
        return cls(*args, **kwargs)

    first_call.__opclass_new__ = as_new  # type: ignore[attr-defined]
    first_call.__opclass_stand_in__ = True  # type: ignore[attr-defined]
    first_call.__qualname__ = f"{cls.__qualname__}.{'__new__' if as_new else '__call__'}"
    cls._opclass_call = shield(first_call)


def call_function(cls: Any) -> Callable[..., Any]:
    """``cls``'s generated call function, generated now if the op was not called yet."""
    call = cls.__dict__["_opclass_call"]
    if getattr(call, "__opclass_stand_in__", False):
        with LOCK:
            if cls.__dict__["_opclass_call"] is call:
                _build_call(cls.__dict__["_opclass_record"], cls)
    return cls.__dict__["_opclass_call"]  # type: ignore[no-any-return]


def _build_call(record: OpRecord, cls: Any) -> None:
    """Generate and install ``cls``'s call, and the C entry for simple ops. Where ``OpMeta`` has no
    C call (no native guard at import), the function is the class's ``__new__``, which
    ``OpMeta.__setattr__`` installs when ``_opclass_call`` is set."""
    cls._opclass_call = _make_call(record, cls, "native", not native.CALL_IS_NATIVE)
    # The C entry repeats the generated function's decisions, so only where it has a fast path.
    cls._opclass_fast = c_entry(record) if record.plan is not None and record.plan.off is None else None
    module = native.native_module()
    if module is not None:
        with contextlib.suppress(TypeError):  # a metaclass with a __call__ of its own keeps it
            module.enable_vectorcall(type(cls), cls)  # calls skip tp_call's argument tuple


def python_guard_call(record: OpRecord, cls: type) -> Callable[..., Any] | None:
    """``cls``'s call function as the pure-Python guard writes it (``None``: no fast path)."""
    return _make_call(record, cls, "python", False) if record.plan is not None and record.plan.off is None else None


def _make_call(record: OpRecord, cls: type, guard: str, as_new: bool) -> Callable[..., Any]:
    """The function ``MyOp(...)`` runs: the op's exact signature, guarded fast path included."""
    source, closure = call_source(record, cls.__name__, guard=guard, as_new=as_new)
    fn = _compile(cls.__name__, source, closure, f"{record.qualname} {cls.__module__}.{cls.__qualname__}")
    fn.__qualname__ = f"{cls.__qualname__}.{'__new__' if as_new else '__call__'}"
    fn.__opclass_new__ = as_new  # type: ignore[attr-defined]
    fn.__module__ = cls.__module__
    fn.__doc__ = f"Call ``{record.qualname}{record.schema_str}``."
    fn.__signature__ = record.signature  # type: ignore[attr-defined]
    return fn


def _compile(name: str, source: str, closure: dict[str, Any], filename_hint: str) -> Callable[..., Any]:
    """Compile ``source`` (one ``def name``) with ``closure`` as its free variables, its source
    registered in :mod:`linecache` under a unique, readable filename (as attrs does)."""
    filename = f"<opclass generated {filename_hint} #{next(_COUNTER)}>"
    body = "\n".join("    " + line for line in source.splitlines())
    outer = f"def __create_fn__({', '.join(closure)}):\n{body}\n    return {name}\n"
    namespace: dict[str, Any] = {}
    exec(compile(outer, filename, "exec", dont_inherit=True), {"__builtins__": __builtins__}, namespace)  # noqa: S102 - our own source
    fn: Callable[..., Any] = namespace["__create_fn__"](**closure)
    linecache.cache[filename] = (len(outer), None, outer.splitlines(keepends=True), filename)
    shield(fn)  # run eagerly (after a graph break), the call is not torch.compile's to trace
    weakref.finalize(fn, linecache.cache.pop, filename, None)  # a removed op's source goes with it
    return fn


def retire(record: OpRecord) -> None:
    """Point a replaced or removed op's class at the live op of its name, so it never runs stale kernels."""
    cls = record.owner()
    if cls is not None:
        cls._opclass_call = _redirect(record.qualname)
        cls._opclass_op = None
        cls._opclass_fast = None


def _redirect(qualname: str) -> Callable[..., Any]:
    def replaced_op(*args: Any, **kwargs: Any) -> Any:
        record = lookup(qualname)
        if record is None or not record.live:
            with LOCK:  # another thread's definition of the name ends first
                record = lookup(qualname)
        if record is None or record.op is None:
            raise RuntimeError(f"{qualname} was removed; define its class again to use it")
        cls = record.owner()
        return cls(*args, **kwargs) if cls is not None else record.op(*args, **kwargs)

    return replaced_op
