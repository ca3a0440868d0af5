"""The per-op record (everything the dispatcher kernels and the fast path read) and the live-op table."""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any, Callable

import torch
from torch.fx.node import _side_effectful_functions

__all__ = ["OpRecord", "remove", "lookup"]


@dataclasses.dataclass(eq=False)
class OpRecord:
    """What opclass knows about one defined op; ``MyOp.record``.

    Hooks' installers fill in ``kernels``, ``fake``, ``setup_context``/``backward``; the dispatcher
    kernels and the eager fast path read them. ``hooks`` maps each defined hook to the user's raw
    value, so an extension can find its own (``record.hooks["inverse"]``).

    Example:
        >>> import torch, opclass
        >>> class DocsRecordNeg(opclass.CustomOp, name="docs_record::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        >>> DocsRecordNeg.record.mutated
        ()
        >>> opclass.remove(DocsRecordNeg)
    """

    #: ``"ns::name"`` or ``"ns::name.overload"``.
    qualname: str
    namespace: str
    name: str
    overload: str
    #: The schema without the name, e.g. ``"(Tensor x) -> Tensor"``.
    schema_str: str
    schema: torch._C.FunctionSchema
    signature: inspect.Signature
    tags: tuple[torch.Tag, ...]
    hooks: dict[str, Any]
    cls_name: str
    lib: torch.library.Library | None = None
    op: torch._ops.OpOverload | None = None
    #: Backend kernels as the dispatcher calls them, by device type; ``None`` is ``default``.
    kernels: dict[str | None, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    #: The user's own kernel functions, unwrapped, by device type (the fast path checks outputs itself).
    user_kernels: dict[str | None, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    fake: Callable[..., Any] | None = None
    setup_context: Callable[..., Any] | None = None
    backward: Callable[..., Any] | None = None
    #: The user's forward-mode formula ``jvp(ctx, *input_tangents)``, if any.
    jvp: Callable[..., Any] | None = None
    #: The op's call under torch.func transforms (applies the autograd.Function from Python).
    functorch_entry: Callable[..., Any] | None = None
    #: ``eager_autograd = True``: eager autograd differentiates through the kernel itself.
    eager_autograd: bool = False
    #: The ``samples()`` hook: representative inputs for :mod:`opclass.testing` (metadata only).
    samples: Callable[..., Any] | None = None
    #: The autograd.Function subclass the Autograd kernel applies when grad is needed.
    autograd_function: type[torch.autograd.Function] | None = None
    #: Per device type, the Function the eager fast path applies (its forward calls that kernel).
    fast_functions: dict[str, type[torch.autograd.Function]] = dataclasses.field(default_factory=dict)
    #: Positions (in schema order) of the arguments the op writes to.
    mutated: tuple[int, ...] = ()
    #: Names of the arguments the op writes to.
    mutated_names: tuple[str, ...] = ()
    live: bool = False
    #: Weak reference to the class that defined the op.
    owner: Callable[[], Any] | None = None
    #: Hooks' ``uninstall`` calls, run (newest first) when the op is removed or replaced.
    cleanups: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    @property
    def is_inplace(self) -> bool:
        """True for ``Tag.inplace`` ops, which mutate and return their first argument."""
        return torch.Tag.inplace in self.tags

    @property
    def is_out(self) -> bool:
        """True for ``Tag.out`` ops, which write into keyword-only ``out`` Tensors and return them."""
        return torch.Tag.out in self.tags

    @property
    def is_functional(self) -> bool:
        """The op mutates nothing (so its outputs must not alias its inputs)."""
        return not self.mutated

    def overload_name(self) -> str:
        """``name`` or ``name.overload``, as ``Library.define`` wants it."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


_LIVE: dict[str, OpRecord] = {}
LOCK = threading.RLock()


def lookup(qualname: str) -> OpRecord | None:
    """The live record for ``qualname``, if opclass defined it."""
    return _LIVE.get(qualname)


def set_live(record: OpRecord) -> OpRecord | None:
    """Make ``record`` the live one for its name; returns the one it replaces."""
    old = _LIVE.get(record.qualname)
    _LIVE[record.qualname] = record
    record.live = True
    if old is not None and old is not record:
        old.live = False
    return old


def destroy(record: OpRecord) -> None:
    """Drop every dispatcher registration of ``record`` (idempotent)."""
    record.live = False
    _side_effectful_functions.discard(record.op)
    while record.cleanups:
        record.cleanups.pop()()
    if record.lib is not None:
        record.lib._destroy()
        release = getattr(record.lib, "release", None)
        if release is not None:
            release()
        record.lib = None
    record.op = None


def remove(op: Any) -> None:
    """Remove an op's registrations: the op is gone from ``torch.ops`` and its class stops working.

    Takes the op class or its qualified name. Use it in tests and notebooks; redefining a class
    with the same name already replaces the old op without it.

    Example:
        >>> import torch, opclass
        >>> class DocsRemoved(opclass.CustomOp, name="docs_remove::twice"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return 2 * x
        >>> opclass.remove(DocsRemoved)
        >>> hasattr(torch.ops.docs_remove, "twice")
        False
    """
    qualname = op if isinstance(op, str) else getattr(op, "qualname", None)
    if not isinstance(qualname, str):
        raise TypeError(f"opclass.remove() takes a CustomOp class or a qualified name, not {op!r}")
    with LOCK:
        record = _LIVE.pop(qualname, None)
        if record is not None:
            destroy(record)
            retire(record)


def remove_namespace(namespace: str) -> None:
    """Remove every op opclass defined in ``namespace`` (a test fixture's clean-up).

    Example:
        >>> import opclass
        >>> opclass.remove_namespace("docs_nothing_here")
    """
    with LOCK:
        for qualname in [q for q, r in _LIVE.items() if r.namespace == namespace]:
            record = _LIVE.pop(qualname)
            destroy(record)
            retire(record)


def retire(old: OpRecord) -> None:
    """Point a replaced or removed class at the live op of its name, so it never runs stale kernels."""
    cls = old.owner() if old.owner is not None else None
    if cls is not None:
        cls._opclass_call = _redirect(old.qualname)
        cls._opclass_op = None
        cls._opclass_fast = None


def _redirect(qualname: str) -> Callable[..., Any]:
    def replaced_op(*args: Any, **kwargs: Any) -> Any:
        record = _LIVE.get(qualname)
        if record is None or record.op is None:
            raise RuntimeError(f"{qualname} was removed; define its class again to use it")
        cls = record.owner() if record.owner is not None else None
        return cls(*args, **kwargs) if cls is not None else record.op(*args, **kwargs)

    return replaced_op
