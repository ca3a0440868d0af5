"""What the class defines (:class:`OpSpec`, frozen), what one install produced (:class:`OpRecord`),
and the live-op table.

A redefinition, a restore after a failed one, or a removal never edits an install: it builds a
fresh :class:`OpRecord` from the spec, so nothing of an earlier install can leak into a later one.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch
from torch.fx.node import _side_effectful_functions

from ._compat import tagged_inplace, tagged_out

if TYPE_CHECKING:
    from ._plan import CallPlan

__all__ = ["OpSpec", "OpRecord", "Kernel", "remove", "lookup"]


@dataclasses.dataclass(frozen=True, eq=False)
class OpSpec:
    """What an op class defines: its name, schema, tags and hooks. Frozen: installs only read it."""

    #: ``"ns::name"`` or ``"ns::name.overload"``.
    qualname: str
    #: The op's namespace, the ``ns`` of ``torch.ops.ns.name``.
    namespace: str
    #: The op's name within its namespace, without the overload.
    name: str
    #: The overload name (``""`` for the default overload).
    overload: str
    #: The schema without the name, e.g. ``"(Tensor x) -> Tensor"``.
    schema_str: str
    #: The parsed schema, as ``torch.ops.ns.name.default._schema`` has it.
    schema: torch._C.FunctionSchema
    #: The kernels' Python signature (parameters, defaults, keyword-only markers), used to bind calls.
    signature: inspect.Signature
    #: The ``torch.Tag`` values of the class's ``tags=`` keyword.
    tags: tuple[torch.Tag, ...]
    #: Each defined hook's raw value by hook name; an extension finds its own as ``record.hooks["inverse"]``.
    hooks: dict[str, Any]
    #: The defining class's ``__name__``, as error messages name it.
    cls_name: str
    #: Positions (in schema order) of the arguments the op writes to.
    mutated: tuple[int, ...] = ()
    #: Names of the arguments the op writes to, in the order of ``mutated``.
    mutated_names: tuple[str, ...] = ()
    #: ``existing=True``: the class extends an op defined elsewhere (its install defines nothing).
    existing: bool = False

    @property
    def is_inplace(self) -> bool:
        """True for ``Tag.inplace`` ops, which mutate and return their first argument."""
        return tagged_inplace(self.tags)

    @property
    def is_out(self) -> bool:
        """True for ``Tag.out`` ops, which write into keyword-only ``out`` Tensors and return them."""
        return tagged_out(self.tags)

    @property
    def is_functional(self) -> bool:
        """The op mutates nothing (so its outputs must not alias its inputs)."""
        return not self.mutated

    def overload_name(self) -> str:
        """``name`` or ``name.overload``, as ``Library.define`` wants it."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One backend kernel of an op: :meth:`OpRecord.kernel_for` answers with it.

    ``user`` is the user's function (the fast path calls it and checks outputs inline),
    ``checked`` what the dispatcher calls (the output contract included), ``hook`` the hook that
    defined it (``"cpu"``, ``"default"``) and ``where`` how errors name it (``"ns::op (Cls.cpu)"``).
    """

    hook: str
    user: Callable[..., Any]
    checked: Callable[..., Any]
    where: str


class OpRecord(OpSpec):
    """One install of an op: the spec's fields (still frozen) plus everything installing it
    produced; ``MyOp.record``.

    Hooks' installers get it: they register through ``record.lib`` (every registration is
    recorded with its dispatch key and hook, see :mod:`opclass._plan`) and fill in the rest.

    Example:
        >>> import torch, opclass
        >>> class DocsRecordNeg(opclass.CustomOp, name="docs_record::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        >>> DocsRecordNeg.record.mutated
        ()
        >>> DocsRecordNeg.record.kernel_for("cpu").where
        'docs_record::neg (DocsRecordNeg.default)'
        >>> opclass.remove(DocsRecordNeg)
    """

    def __init__(self, spec: OpSpec) -> None:
        super().__init__(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(OpSpec)})
        #: What the class defines, for a later fresh install (a restore after a failed redefinition).
        self.spec = spec
        #: The op's ``torch.library`` fragment, which every registration goes through (``None`` once destroyed).
        self.lib: Any = None
        #: The ``OpOverload``, ``torch.ops.ns.name.overload`` (``None`` once removed).
        self.op: torch._ops.OpOverload | None = None
        #: Backend kernels by device type, as device hooks install them; the key ``None`` holds ``default``.
        self.kernels: dict[str | None, Kernel] = {}
        #: The ``abstract`` hook, the fake kernel for FakeTensor tracing, or ``None`` when there is none.
        self.fake: Callable[..., Any] | None = None
        #: The autograd formula's ``setup_context``, always called as ``(ctx, inputs, keyword_only_inputs, output)``.
        self.setup_context: Callable[..., Any] | None = None
        #: The autograd formula's ``backward(ctx, *grads)``, or ``None`` when the op has no formula.
        self.backward: Callable[..., Any] | None = None
        #: The user's forward-mode formula ``jvp(ctx, *input_tangents)``, if any.
        self.jvp: Callable[..., Any] | None = None
        #: The op's call under torch.func transforms (applies the autograd.Function from Python).
        self.functorch_entry: Callable[..., Any] | None = None
        #: True for ``eager_autograd = True`` ops, whose eager autograd differentiates through the kernel itself.
        self.eager_autograd = False
        #: The ``samples()`` hook, representative inputs for :mod:`opclass.testing` (metadata only).
        self.samples: Callable[..., Any] | None = None
        #: Gives the autograd.Function of :attr:`autograd_function` (created on its first call).
        self.make_autograd_function: Callable[[], type[torch.autograd.Function]] | None = None
        #: Per device type, the Function the eager fast path applies (its forward calls that
        #: kernel); each is created on first lookup.
        self.fast_functions: Mapping[str, type[torch.autograd.Function]] = {}
        #: What a plain eager call may do without the dispatcher (see :mod:`opclass._plan`).
        self.plan: CallPlan | None = None
        #: True while this install is the op's current one (False once replaced or removed).
        self.live = False
        #: Weak reference to the class that defined the op.
        self.owner: Callable[[], Any] | None = None
        #: Hooks' ``uninstall`` calls, run (newest first) when the op is removed or replaced.
        self.cleanups: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<OpRecord {self.qualname}{self.schema_str}; {self.plan or 'not installed'}>"

    @property
    def autograd_function(self) -> type[torch.autograd.Function] | None:
        """The autograd.Function the Autograd kernel applies when grad is needed (``None``
        before the install made one); created on first use, as most ops are never
        differentiated."""
        make = self.make_autograd_function
        return make() if make is not None else None

    def kernel_for(self, device_type: str) -> Kernel | None:
        """The kernel that serves ``device_type`` (its own hook, else ``default``), or ``None``."""
        return self.kernels.get(device_type) or self.kernels.get(None)


_LIVE: dict[str, OpRecord] = {}
LOCK = threading.RLock()


def live_records() -> list[OpRecord]:
    """Every live op's record (a copy: callers may redefine ops while iterating)."""
    with LOCK:
        return list(_LIVE.values())


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
    if not record.existing:  # an extended op's entry, if any, is not ours
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
