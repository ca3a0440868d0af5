"""Static typing for op calls: what pyright (and mypy, with ``opclass.mypy``) sees.

pyright types ``MyOp(...)`` through ``OpMeta.__call__``, whose ``cls`` is typed as :data:`Kernel`:
a union of protocols, one per kernel hook (``default``, then the device kernels), each with that
one static method. pyright binds the class to the first member it matches, so a ParamSpec captures
that kernel's parameters and its return type. A class with no kernel matches only the last
member, whose method is ``CustomOp``'s typing-only ``_abstract_op_base_has_no_kernel``: calling
it is an error that says so. ``abstract`` comes just before it: an op extended with
``existing=True`` often defines only the fake kernel (its real kernels are the C++ ones), and pyright
cannot see the class keyword; the price is that an abstract base with an ``abstract`` hook and no
kernel is not flagged by pyright (mypy's plugin, which reads the keyword, still flags it).

One union, not one overload per hook: when no overload of a call matches, pyright reports either
"No overloads for __call__ match" or the error of whichever overload the arguments fit best (a
catch-all overload fits a missing argument best), never the kernel's parameter by name. With a
single signature it reports the missing, unexpected or mistyped argument by name, as mypy does.
No module imports this at runtime.
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

class NoKernel(Protocol[P, R]):
    @staticmethod
    def _abstract_op_base_has_no_kernel(*args: P.args, **kwargs: P.kwargs) -> R: ...

Kernel: TypeAlias = Union[
    type[HasDefault[P, R]],
    type[HasCpu[P, R]],
    type[HasCuda[P, R]],
    type[HasMps[P, R]],
    type[HasXpu[P, R]],
    type[HasHpu[P, R]],
    type[HasMtia[P, R]],
    type[HasXla[P, R]],
    type[HasIpu[P, R]],
    type[HasMaia[P, R]],
    type[HasHip[P, R]],
    type[HasPrivateuseone[P, R]],
    type[HasAbstract[P, R]],
    type[NoKernel[P, R]],
]
