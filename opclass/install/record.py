"""What one install of an op produced (:class:`OpRecord`), and the table of live ops.

A redefinition, a restore after a failed one, or a removal never edits an install: it builds a
fresh :class:`OpRecord` from the spec, so nothing of an earlier install can leak into a later one.

Example:
    >>> from opclass.install import record
    >>> record.lookup("docs_record::nothing") is None
    True
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.fx.node import _side_effectful_functions

from opclass.core.compat import unregister_config
from opclass.define.spec import OpSpec
from opclass.install.outputs import Contract
from opclass.install.table import Entry, Kernel, KernelTable

if TYPE_CHECKING:
    from opclass.install.functions import Formula, Functions
    from opclass.install.plan import CallPlan

__all__ = ["OpRecord", "GUARDED", "LOCK", "lookup", "live_records", "set_live", "take_live", "destroy", "undo_hooks"]

#: The key a lowered op's class call, traced by dynamo under a guard on what its trace chooses by,
#: sets in its graph node's meta: tracing that node needs no warning of a stale graph.
GUARDED = "opclass_guarded"


class OpRecord(OpSpec):
    """One install of an op: the spec's fields (still frozen) plus everything installing it
    produced; ``MyOp.record``.

    Hooks' installers get it: they register through ``record.lib`` (every registration is
    recorded with its dispatch key and hook, see :mod:`opclass.install.plan`) and fill in the rest.

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
        super().__init__(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(OpSpec) if f.init})
        #: What the class defines, for a later fresh install (a restore after a failed redefinition).
        self.spec = spec
        #: The op's ``torch.library`` fragment, which every registration goes through (``None`` once destroyed).
        self.lib: Any = None
        #: The ``OpOverload``, ``torch.ops.ns.name.overload`` (``None`` once removed).
        self.op: torch._ops.OpOverload | None = None
        #: What every kernel's result must be and becomes (:mod:`opclass.install.outputs`).
        self.outputs = Contract(spec.schema, spec.tags, spec.mutated_names)
        #: Every backend kernel of the op, and the choice among them (hooks add to it).
        self.table = KernelTable(self)
        #: The fake kernel for FakeTensor tracing, or ``None`` until one is registered.
        self.fake: Callable[..., Any] | None = None
        #: How errors name the hook whose function is the fake kernel (``None``: one opclass generated).
        self.fake_where: str | None = None
        #: The op defined elsewhere ran under FakeTensor before this install (its own fake kernel).
        self.had_fake = False
        #: The autograd formula, or what stands in for it (``None``: the op has none).
        self.formula: Formula | None = None
        #: Set where eager autograd differentiates through the kernel itself instead of applying a
        #: formula: ``check(where, out)``, run on a result computed with grad needed.
        self.differentiates_kernel: Callable[[str, Any], None] | None = None
        #: Set where a hook's kernel is the op's body (CompositeImplicitAutograd): autograd and
        #: FakeTensor run it, so opclass registers no Autograd, ADInplaceOrView or fake kernel.
        self.decomposes = False
        #: Makes the kernel registered at the Autograd key (a hook may give its own).
        self.autograd_kernel: Callable[[OpRecord], Callable[..., Any]] | None = None
        #: The op's call under torch.func transforms (made by the install when no hook gave one).
        self.functorch_entry: Callable[..., Any] | None = None
        #: Set where torch.compile traces into the op's kernels instead of recording one node (a hook
        #: lowers it): the kernels a trace in this context may trace into, and whether the provider
        #: state in force chooses among them (a class call traced by dynamo is then guarded on it).
        self.lowered: Callable[[], tuple[list[Entry], bool]] | None = None
        #: The op's autograd.Functions, made on first need (:func:`opclass.install.functions.functions`).
        self.functions: Functions | None = None
        #: What a plain eager call may do without the dispatcher (see :mod:`opclass.install.plan`).
        self.plan: CallPlan | None = None
        #: True while this install is the op's current one (False once replaced or removed).
        self.live = False
        #: Weak reference to the class that defined the op (``None`` until one is set, or once it is gone).
        self.owner: Callable[[], Any] = lambda: None
        #: Hooks' ``uninstall`` calls, run (newest first) when the op is removed or replaced.
        self.cleanups: list[Callable[[], None]] = []
        #: What hooks add to ``repr(record)``: a function each, giving a part.
        self.shown: list[Callable[[], str]] = []

    def __repr__(self) -> str:
        parts = [part() for part in self.shown] + ([self.table.shown()] if self.table.has_providers else [])
        return f"<OpRecord {self.qualname}{self.schema_str}; {self.plan or 'not installed'}{''.join('; ' + part for part in parts)}>"

    @property
    def autograd_function(self) -> type[torch.autograd.Function]:
        """The autograd.Function the Autograd kernel applies when grad is needed (made on first use)."""
        from opclass.install.functions import functions  # the Functions are made from the record

        return functions(self).generic

    @property
    def differentiable(self) -> bool:
        """The op has an autograd formula of its own (a ``backward``)."""
        return self.formula is not None and self.formula.backward is not None

    @property
    def kernels(self) -> dict[str | None, Kernel]:
        """What a plain call runs, by device type (``None``: every device type without its own)."""
        return self.table.kernels

    def kernel_for(self, device_type: str) -> Kernel | None:
        """The kernel that serves ``device_type`` (its own hook, else the one for every device), or ``None``."""
        return self.kernels.get(device_type) or self.kernels.get(None)


_LIVE: dict[str, OpRecord] = {}
#: Held from a definition's name check to its class call; the background guard build takes it too.
LOCK = threading.RLock()


def live_records() -> list[OpRecord]:
    """Every live op's record (a copy: callers may redefine ops while iterating)."""
    with LOCK:
        return list(_LIVE.values())


def lookup(qualname: str) -> OpRecord | None:
    """The live record for ``qualname``, if opclass defined it."""
    return _LIVE.get(qualname)


def set_live(record: OpRecord) -> None:
    """Make ``record`` the live one for its name (the one it replaces is live no more)."""
    old = _LIVE.get(record.qualname)
    _LIVE[record.qualname] = record
    record.live = True
    if old is not None and old is not record:
        old.live = False


def take_live(qualname: str | None = None, namespace: str | None = None) -> list[OpRecord]:
    """Remove ops from the table (one name, or a whole namespace), destroyed; returns them."""
    with LOCK:
        names = [q for q, r in _LIVE.items() if q == qualname or r.namespace == namespace]
        taken = [_LIVE.pop(q) for q in names]
        for record in taken:
            destroy(record)
        return taken


def destroy(record: OpRecord) -> None:
    """Drop every dispatcher registration of ``record`` (idempotent), and the config types it
    registered that no live op uses (where torch can take one back)."""
    record.live = False
    if not record.existing:  # an extended op's entry, if any, is not ours
        _side_effectful_functions.discard(record.op)
    undo_hooks(record)
    if record.lib is not None:
        configs = record.lib.configs
        record.lib._destroy()
        record.lib.release()
        # The fragment's last reference: torch's finalizer of it runs here, before the op's
        # OpOverload goes. Run later, torch 2.11 has been seen to read a freed schema when the
        # next overload of the same name is destroyed.
        record.lib = None
        used = {c for r in live_records() if r is not record for c in r.configs.values()}
        for cls in configs:
            if cls not in used:
                unregister_config(cls)
    record.op = None


def undo_hooks(record: OpRecord) -> None:
    """Run the hooks' ``uninstall`` calls (newest first), once."""
    while record.cleanups:
        record.cleanups.pop()()
