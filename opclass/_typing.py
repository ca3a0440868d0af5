"""Static typing for op calls: what pyright (and mypy, with ``opclass.mypy``) sees; never imported at runtime.

pyright types ``MyOp(...)`` through ``OpMeta.__call__``, whose ``cls`` is :data:`Kernel`: a union
of protocols, one per kernel hook in :data:`opclass.core.names.HOOK_KINDS` order, each with that
one static method. pyright binds the class to the first member it matches, so a ParamSpec
captures that kernel's parameters and return type. A class with no kernel matches only the last
member, ``CustomOp``'s typing-only ``_abstract_op_base_has_no_kernel``, whose call is an error.
``abstract`` and ``reference`` (no op of their own) are members too: an ``existing=True`` class
often defines only the fake kernel, a keyword pyright cannot see. One union rather than
overloads, so pyright names the missing or mistyped argument, as mypy does.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, Union

from typing_extensions import ParamSpec, TypeAlias

P = ParamSpec("P")
R = TypeVar("R", covariant=True)

class HasDefault(Protocol[P, R]):
    @staticmethod
    def default(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasCpu(Protocol[P, R]):
    @staticmethod
    def cpu(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasCuda(Protocol[P, R]):
    @staticmethod
    def cuda(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasMps(Protocol[P, R]):
    @staticmethod
    def mps(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasXpu(Protocol[P, R]):
    @staticmethod
    def xpu(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasHpu(Protocol[P, R]):
    @staticmethod
    def hpu(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasMtia(Protocol[P, R]):
    @staticmethod
    def mtia(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasXla(Protocol[P, R]):
    @staticmethod
    def xla(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasIpu(Protocol[P, R]):
    @staticmethod
    def ipu(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasMaia(Protocol[P, R]):
    @staticmethod
    def maia(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasHip(Protocol[P, R]):
    @staticmethod
    def hip(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasPrivateuseone(Protocol[P, R]):
    @staticmethod
    def privateuseone(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasAbstract(Protocol[P, R]):
    @staticmethod
    def abstract(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasComposite(Protocol[P, R]):
    @staticmethod
    def composite(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasAutograd(Protocol[P, R]):
    @staticmethod
    def autograd(*args: P.args, **kwargs: P.kwargs) -> R: ...

class HasReference(Protocol[P, R]):
    @staticmethod
    def reference(*args: P.args, **kwargs: P.kwargs) -> R: ...

class NoKernel(Protocol[P, R]):
    @staticmethod
    def _abstract_op_base_has_no_kernel(*args: P.args, **kwargs: P.kwargs) -> R: ...

Kernel: TypeAlias = Union[
    type[HasDefault[P, R]], type[HasCpu[P, R]], type[HasCuda[P, R]], type[HasMps[P, R]],
    type[HasXpu[P, R]], type[HasHpu[P, R]], type[HasMtia[P, R]], type[HasXla[P, R]],
    type[HasIpu[P, R]], type[HasMaia[P, R]], type[HasHip[P, R]], type[HasPrivateuseone[P, R]],
    type[HasAbstract[P, R]], type[HasComposite[P, R]], type[HasAutograd[P, R]], type[HasReference[P, R]], type[NoKernel[P, R]]
]
