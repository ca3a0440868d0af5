"""Static typing for op calls: what pyright (and mypy, with ``opclass.mypy``) sees.

pyright types ``MyOp(...)`` through ``OpMeta.__call__``, whose overloads below take the signature
of the class's first kernel in this order: ``default``, then the device kernels. Each
overload binds ``cls`` to a protocol with one static method, so a ParamSpec captures the kernel's
parameters and its return type. No module imports this at runtime.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from typing_extensions import ParamSpec

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
