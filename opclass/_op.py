"""``CustomOp``: the base class users subclass, with the documented hook stubs; and ``OpMeta``,
whose call is the op's call (examples: on the classes). A class statement is
:func:`opclass.lifecycle.define`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable

import torch

from opclass import _plugins, lifecycle
from opclass.builtin_hooks.builtin import register_builtin_hooks
from opclass.callpath import dynamo
from opclass.core import native
from opclass.core.shield import shield
from opclass.define.hookspec import hooks
from opclass.install import record as records
from opclass.install.record import OpRecord

if TYPE_CHECKING:
    from typing_extensions import Never

    from opclass import _typing as _t

__all__ = ["CustomOp", "OpMeta"]


_NATIVE = native.native_module()
# With the native guard, OpMeta's call is C code that calls the class's generated function
# directly; Python only runs for abstract classes and argument-binding errors.
# Type checkers must see plain `type` as the base, or pyright stops using OpMeta.__call__ for
# conversions such as `f: Callable[[Tensor], Tensor] = MyOp`.
if TYPE_CHECKING:
    _MetaBase = type
else:
    _MetaBase = _NATIVE.MetaBase if _NATIVE is not None else type


@shield
def _call(cls: Any, *args: Any, **kwargs: Any) -> Any:
    call = cls._opclass_call
    if call is None:
        raise TypeError(
            f"{cls.__qualname__} is an abstract op base (it defines no kernel such as cpu, cuda or default); "
            f"subclass it and define a kernel to make an op"
        )
    try:
        return call(*args, **kwargs)
    except TypeError as e:
        # Raised while binding arguments to the generated signature (no frame of it ran):
        # let the dispatcher parse them, so callers get the error torch.ops would give.
        tb = e.__traceback__
        if tb is None or tb.tb_next is None:
            record = _live_record(cls)
            if record.op is not None:
                return record.op(*args, **kwargs)
        raise


class OpMeta(_MetaBase):
    """Metaclass of :class:`CustomOp`: calling an op class calls the op.

    Example:
        >>> import torch, opclass
        >>> class DocsMetaSquare(opclass.CustomOp, name="docs_meta::square", schema="(Tensor x) -> Tensor"):
        ...     default = staticmethod(lambda x: x * x)
        >>> DocsMetaSquare(torch.tensor([3.0])), type(DocsMetaSquare) is opclass.OpMeta
        (tensor([9.]), True)
        >>> opclass.remove(DocsMetaSquare)
    """

    if TYPE_CHECKING:
        # pyright: the call has the signature of the class's first kernel (see _typing.py).
        # mypy ignores a metaclass __call__ (opclass.mypy gives each op class a __new__ instead),
        # and rejects a union as the type of cls, which pyright needs.
        def __call__(cls: _t.Kernel[_t.P, _t.R], *args: _t.P.args, **kwargs: _t.P.kwargs) -> _t.R: ...  # type: ignore[misc]

    def __setattr__(cls, name: str, value: Any) -> None:
        # The value replaced is freed only after the write: freed during it (a generated call's
        # finalizer runs Python code), another thread could read it from the type's attribute
        # cache, which the write updates last.
        before = cls.__dict__.get(name), cls.__dict__.get("__new__")
        if name == "_opclass_call" and _NATIVE is None:
            # The class's call is its __new__ (see above): keep the two in step.
            if value is None:
                new: Any = CustomOp.__dict__["__new__"]  # an abstract base: its error
            else:  # a generated __new__, or a replaced class's redirect
                new = staticmethod(value if getattr(value, "__opclass_new__", False) else _forwarding_new(value))
            super().__setattr__("__new__", new)
        if name == "__call__":
            shown = cls.__qualname__.rpartition("<locals>.")[2]
            # torch.compile(MyOp) / torch._dynamo.disable(MyOp) treat a class as one to decorate
            # and set its __call__, which calling an op class never reads: refuse, unchanged.
            raise TypeError(
                f"torch.compile({shown}) cannot compile an op class: it would set {shown}.__call__, which op "
                f"calls never use, and the op would run uncompiled. Compile a function that calls the op "
                f"instead, e.g. torch.compile(lambda x: {shown}(x))"
            )
        super().__setattr__(name, value)
        del before

    @property
    def record(cls) -> OpRecord:
        """The op's :class:`OpRecord` (raises ``AttributeError`` on an abstract base)."""
        return _live_record(cls)

    @property
    def op(cls) -> torch._ops.OpOverload:
        """The ``OpOverload``, i.e. ``torch.ops.ns.name.overload``."""
        op = _live_record(cls).op
        assert op is not None
        return op

    @property
    def qualname(cls) -> str:
        """``"ns::name"`` (or ``"ns::name.overload"``)."""
        return _live_record(cls).qualname

    @property
    def schema(cls) -> str:
        """The schema without the name, e.g. ``"(Tensor x) -> Tensor"``."""
        return _live_record(cls).schema_str

    @property
    def _opclass_choice(cls) -> str:
        # A data descriptor, read anew each time: what dynamo guards a lowered op's class call on.
        return dynamo.choice_token(cls)


dynamo.watch(OpMeta)

if _NATIVE is not None:
    _NATIVE.set_fallback(_call)
    _NATIVE.enable_vectorcall(OpMeta)
# Otherwise OpMeta has no __call__: `MyOp(...)` is type.__call__, which runs the class's
# __new__, the generated call itself (one Python frame; OpMeta.__setattr__ installs it).


def _forwarding_new(call: Callable[..., Any]) -> Callable[..., Any]:
    def __new__(_cls: Any, *args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    return shield(__new__)


def _live_record(cls: Any) -> OpRecord:
    record: OpRecord | None = cls.__dict__.get("_opclass_record")
    if record is None:
        raise AttributeError(f"{cls.__qualname__} is an abstract op base: it defines no kernel, so it is no op")
    live = record if record.live else records.lookup(record.qualname)
    if live is None:
        raise AttributeError(f"{record.qualname} was removed; define {cls.__qualname__} again to use it")
    return live


class CustomOp(metaclass=OpMeta):
    """Base class of custom operators: subclass it and define hooks as static methods.

    Class keywords: ``name`` (``"ns::op"``, ``"ns::op.overload"``, or a bare ``"op"`` under an
    inherited ``namespace``; default: the class name in snake_case), ``namespace`` (inherited by
    subclasses), ``mutates_args`` (names of the Tensor arguments the op writes to, any iterable;
    ``"unknown"``, as in torch, marks every Tensor argument written), ``schema`` (an
    explicit schema string), ``tags`` (``torch.Tag`` or a sequence of them), ``pt2_compliant``
    (``False``: the op gets exactly ``tags``, without ``torch.Tag.pt2_compliant_tag``) and ``existing``
    (``True``: attach the class's hooks to an op defined elsewhere, e.g. in C++; see the guide
    page "Extending existing ops"). ``out=True`` and ``inplace=("x", ...)`` give the op an ``.out``
    overload and an in-place one beside the functional one (see the guide page "Calling
    conventions"): ``MyOp(x, out=buf)``, ``MyOp.out``, ``MyOp.inplace``.

    A class that defines no kernel (``cpu``, ``cuda``, ``default``, ...) and no ``existing=True``
    is an abstract base and registers nothing. Calling an op class calls the op and returns its result.

    Example:
        >>> import torch, opclass
        >>> from torch import Tensor
        >>> class DocsScale(opclass.CustomOp, name="docs_op::scale"):
        ...     @staticmethod
        ...     def cpu(x: Tensor, factor: float = 2.0) -> Tensor:
        ...         return x * factor
        ...     @staticmethod
        ...     def abstract(x: Tensor, factor: float = 2.0) -> Tensor:
        ...         return torch.empty_like(x)
        >>> DocsScale(torch.ones(2))
        tensor([2., 2.])
        >>> DocsScale.schema
        '(Tensor x, float factor=2.0) -> Tensor'
        >>> opclass.remove(DocsScale)
    """

    _opclass_record: ClassVar[OpRecord | None] = None
    _opclass_call: ClassVar[Callable[..., Any] | None] = None
    _opclass_op: ClassVar[torch._ops.OpOverload | None] = None
    #: The native class call's plain-eager entry for simple ops (see callpath/classcall.py).
    _opclass_fast: ClassVar[tuple[Any, ...] | None] = None
    _opclass_keywords: ClassVar[dict[str, Any]] = {}

    if TYPE_CHECKING:
        # Type checkers only (pyright): what an abstract op base (no kernel) is called with. The
        # last member of _typing.Kernel matches it, so calling such a class is an error naming this.
        @staticmethod
        def _abstract_op_base_has_no_kernel(_abstract_op_base_has_no_kernel: Never, /) -> Never: ...

        #: ``out=True`` / ``inplace=``: the classes calling the op's ``.out`` overload and its
        #: in-place op (what they take is not known statically).
        out: ClassVar[Any]
        inplace: ClassVar[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Eager calls go through OpMeta.__call__ and never get here. torch.compile reads a call
        # of a live op class as a call of its op (callpath/dynamo.py); it traces this only where
        # that does not apply (a torch without the hook, a class without source): give it the
        # plain dispatcher call, so the graph records the op as one node.
        op = cls._opclass_op
        if op is None:
            return _call(cls, *args, **kwargs)
        return op(*args, **kwargs)

    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        namespace: str | None = None,
        mutates_args: Iterable[str] | None = None,
        schema: str | None = None,
        tags: torch.Tag | Iterable[torch.Tag] | None = None,
        pt2_compliant: bool | None = None,
        existing: bool | None = None,
        out: bool | None = None,
        inplace: str | Iterable[str] | None = None,
        **unknown: Never,
    ) -> None:
        # Unknown keywords are definition errors (with a did-you-mean), not forwarded: a mixin
        # that takes class keywords goes before CustomOp in the bases and consumes its own.
        # Typed Never so that type checkers flag them too.
        given = {"name": name, "namespace": namespace, "mutates_args": mutates_args, "schema": schema, "tags": tags, "pt2_compliant": pt2_compliant, "existing": existing, "out": out, "inplace": inplace}
        lifecycle.define(cls, given, unknown)


def _stubs() -> None:
    """Each built-in static hook as a documentation stub on ``CustomOp`` (``help(CustomOp.cpu)``,
    the API page), its doc the hook's own; a stub never counts as a defined hook. Runtime only:
    declared to type checkers, every subclass would seem to have every kernel."""
    for name, hook in hooks().items():
        if hook.staticmethod:

            def stub(*args: Any, **kwargs: Any) -> Any:
                raise NotImplementedError

            stub.__name__, stub.__qualname__ = name, f"CustomOp.{name}"
            stub.__opclass_stub__ = True  # type: ignore[attr-defined]
            doc = hook.doc.replace("*", "\\*")  # reST: a lone * starts emphasis
            stub.__doc__ = f"The ``{name}`` hook: {doc}. The hooks table (docs/guide/hooks.md) says what it registers."
            setattr(CustomOp, name, staticmethod(stub))


# Here, not in the package's __init__ (which imports nothing, for opclass.mypy): any op class needs
# this module, so the built-in hooks are registered, first, whichever way opclass is entered.
register_builtin_hooks()
_stubs()
lifecycle.ROOT.append(CustomOp)
# The installed plugins add their providers before the first op class is defined.
lifecycle.FIRST.append(_plugins.load_plugins)
