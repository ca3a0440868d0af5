"""Traceable kernels: ``traceable = True`` lets torch.compile trace into an op's kernels.

An op is one opaque node for torch.compile, which hides the Triton launches of a kernel written
with ``torch.library.wrap_triton`` from inductor. Like ``torch.library.triton_op``, this hook:

* registers a ``FunctionalTensorMode`` rule that runs the kernel under the mode, so the graph
  gets its torch ops and ``triton_kernel_wrapper_functional`` nodes (torch.export keeps the op);
* wraps the traced entries of the op's kernel table (and its providers) to run with
  ``wrap_triton`` off, so eager launches go straight to Triton and the call plan keeps its
  fast path;
* uses the traced kernel as fake kernel when there is no ``abstract``;
* lets AOTAutograd's cache find the Triton kernels the op launches, so editing one invalidates
  cached graphs.

A value, not a kernel hook of its own: the kernel stays ``cuda`` (or ``default``), errors name
it as usual, and ``traceable = ("cuda",)`` traces only the kernels for those device types.

An op with providers traces the provider the call would run, chosen at trace time
(``record.lowered`` says which may be, for the class call's guards and cache key:
:mod:`opclass.callpath.dynamo`); ``traceable = "reference"`` traces the op's own kernel (its
device kernel, else ``default``) whatever the order, and so does an exported program's
``run_decompositions`` (a ``True`` op stays one node there), while eager calls keep choosing.
"""

from __future__ import annotations

import collections.abc
from typing import Any, Callable, Iterator

import torch
from torch import _C
from torch._library import triton as _torch_triton
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.traceback import get_current_meta

from opclass.core.shield import eager_kernel
from opclass.define.hookspec import Hook, HookContext
from opclass.errors import raised_by_torch, reraise
from opclass.install import orders
from opclass.install.fake import register_fake
from opclass.install.record import GUARDED, OpRecord
from opclass.install.table import Entry

__all__ = ["traceable_hook"]

_HOOK = "traceable"
#: The value that traces the op's own kernel under torch.compile, whatever the order.
REFERENCE = "reference"
#: The state whose choice is the op's own kernel for the call (orders.MODES[-1]: the reference mode).
_OWN = orders.State(mode=frozenset({orders.MODES[-1]}))


def _reference(value: Any) -> bool:
    return isinstance(value, str) and value == REFERENCE  # never ``==`` on any value (a Tensor's is elementwise)


def _check(value: Any, ctx: HookContext) -> None:
    if value is False:
        return
    if value is not True and not _reference(value) and not (isinstance(value, (tuple, list, set, frozenset)) and value and all(isinstance(d, str) for d in value)):
        ctx.fail(f"must be True, False, {REFERENCE!r} or device types like ('cuda',), got {value!r}", "write traceable = True")
    if _reference(value) and "default" not in ctx.defined and not any(hook.device_type and name in ctx.defined for name, hook in ctx.hooks.items()):
        ctx.fail("traces the op's own kernel under torch.compile, but the class has only providers", f"define {ctx.cls_name}.default (the op in torch ops), or write traceable = True")
    for device in () if value is True or _reference(value) else value:
        try:
            _C._dispatch_key_for_device(device)
        except RuntimeError:
            ctx.fail(f"{device!r} is not a torch device type", "use e.g. 'cuda' or 'cpu'")
        if device not in ctx.defined and "default" not in ctx.defined:
            ctx.fail(f"traces the {device} kernel, but the class has none", f"define {ctx.cls_name}.{device} or {ctx.cls_name}.default, or drop {device!r}")
    if ctx.defined.get("eager_autograd") is True:
        ctx.fail("torch.compile would trace into the kernel, and eager_autograd keeps it one opaque op there", "keep either traceable or eager_autograd = True")
    rules = ctx.defined.get("torch_dispatch")
    if isinstance(rules, collections.abc.Mapping) and FunctionalTensorMode in rules:
        ctx.fail(
            "traces the kernel through a FunctionalTensorMode rule, and torch_dispatch has one too",
            "drop the FunctionalTensorMode entry of torch_dispatch, or traceable",
        )


def _decomposition_rule(record: OpRecord, traced: dict[str | None, Callable[..., Any]], reference: bool) -> Callable[..., Any]:
    """The FunctionalTensorMode rule: run the traced kernel under the mode (torch's triton_op
    ``functional_decomp``), or keep the op as one node for untraced devices and torch.export. An
    op with providers traces the provider the call would run, chosen now (the graph keeps it), or
    with ``reference``, its own kernel for the call, ``run_decompositions`` included."""
    default = traced.get(None)

    def functional_decomposition(mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from torch.export._trace import custom_triton_ops_decomposition_disabled

        if custom_triton_ops_decomposition_disabled() and not reference:  # run_decompositions keeps a triton_op, not the reference
            return mode.__torch_dispatch__(func, types, args, kwargs)
        if any(t not in (torch.Tensor, FunctionalTensor) and not issubclass(t, torch._subclasses.FakeTensor) for t in types):
            return NotImplemented  # another Tensor subclass: its own __torch_dispatch__ goes first
        device = record.arguments.device_of(args, kwargs)
        fn = traced.get(device, default)
        table = record.table
        if fn is not None and table.has_providers:
            slot = device if device in table.kernels else None
            chosen = (table.choice(slot, _OWN) if reference else table.now(slot)).pick(args, kwargs)
            # Unless a guard on the provider state recompiles it, the graph keeps this choice.
            table.traced = table.traced or not (reference or get_current_meta().get(GUARDED))
            fn = chosen.raw if chosen is not None else None
        if fn is None:
            return mode.__torch_dispatch__(func, types, args, kwargs)
        try:
            with mode:
                return fn(*args, **kwargs)
        except Exception as e:
            if not raised_by_torch(e):
                raise
            reraise(e, where, fix)

    where = f"{record.where(_HOOK)}, tracing the kernel into torch ops"
    fix = f"a traceable kernel is torch ops and Triton launches only (not NumPy, not C++): drop {_HOOK} (the op stays one node), or write the kernel in torch ops"
    return functional_decomposition


def _fake_kernel(record: OpRecord, traced: dict[str | None, Callable[..., Any]]) -> Callable[..., Any]:
    default = traced.get(None)

    def traced_fake(*args: Any, **kwargs: Any) -> Any:
        device = record.arguments.device_of(args, kwargs)
        fn = traced.get(device, default)
        if fn is None:
            raise RuntimeError(
                f"{record.qualname} has no fake kernel for {device} tensors, which torch.compile, torch.export and FakeTensor need: "
                f"its {device} kernel is not traceable; define {record.cls_name}.abstract (same arguments; build outputs with torch.empty_like etc.)"
            )
        return fn(*args, **kwargs)

    return traced_fake


def _install(record: OpRecord, value: Any) -> None:
    if value is False:
        return
    # The op's own kernels to trace, by device type (``None``: ``default``, for the device types without their own).
    own = record.table.own()
    traced = own if value is True or _reference(value) else {device: own[device] if device in own else own[None] for device in value}
    # Eager calls of a traced kernel (and of every provider) launch Triton directly.
    record.table.wrap(lambda e: eager_kernel(e.fn) if not e.own or e in traced.values() else None)
    by_device = {device: e.raw for device, e in traced.items()}
    torch.library.register_torch_dispatch(record.qualname, FunctionalTensorMode, _decomposition_rule(record, by_device, _reference(value)), lib=record.lib)
    record.lowered = _lowered(record, traced, value)
    if record.fake is None and record.schema.returns and not (record.is_inplace or record.is_out):
        register_fake(record, _fake_kernel(record, by_device), record.where(_HOOK))
    table: dict[str, Any] = _torch_triton.triton_ops_to_kernels
    if not isinstance(table.get(_table_key(record)), _InnerKernels):
        table[_table_key(record)] = _InnerKernels()
    table[_table_key(record)].kernels[record.qualname] = (record, list(by_device.values()))


def _lowered(record: OpRecord, traced: dict[str | None, Entry], value: Any) -> Callable[[], tuple[list[Entry], bool]]:
    """``record.lowered``: the kernels a trace in this context may trace into (for the traced
    device types: every candidate of the choice in force, or of the op's own), and whether the
    provider state chooses among them."""
    reference = _reference(value)

    def lowered() -> tuple[list[Entry], bool]:
        table = record.table
        if not table.has_providers:
            return list(dict.fromkeys(traced.values())), False
        slots = table.kernels if None in traced else {d if d in table.kernels else None for d in traced}
        choices = [table.choice(slot, _OWN) if reference else table.now(slot) for slot in slots]
        return list({e.name: e for c in choices for e in c.tried}.values()), not reference

    return lowered


class _InnerKernels:
    """``triton_ops_to_kernels[ns::name]``: AOTAutogradCache iterates it when it keys a graph that
    calls the op, to hash the Triton kernels' sources. The scan (``get_inner_triton_kernels``,
    which imports triton and inductor) runs then, never at op definition."""

    def __init__(self) -> None:
        #: Overload qualname -> (the install, its traced kernels).
        self.kernels: dict[str, tuple[OpRecord, list[Callable[..., Any]]]] = {}

    def __iter__(self) -> Iterator[object]:
        found: list[object] = []
        for _, fns in list(self.kernels.values()):
            for fn in fns:
                found.extend(k for k in _torch_triton.get_inner_triton_kernels(fn) if not any(k is f for f in found))
        return iter(found)


def _table_key(record: OpRecord) -> str:
    return f"{record.namespace}::{record.name}"  # what the cache asks: OpOverload._name


def _uninstall(record: OpRecord, value: Any) -> None:
    table: dict[str, Any] = _torch_triton.triton_ops_to_kernels
    entry = table.get(_table_key(record))
    if isinstance(entry, _InnerKernels):
        if entry.kernels.get(record.qualname, (None,))[0] is record:
            del entry.kernels[record.qualname]
        if not entry.kernels:
            del table[_table_key(record)]


def traceable_hook() -> Hook:
    """The ``traceable`` hook: torch.compile traces into the op's kernels (see the module docstring).

    Example:
        >>> import opclass
        >>> opclass.hooks()["traceable"].staticmethod
        False
    """
    return Hook(
        _HOOK,
        _install,
        check=_check,
        staticmethod=False,
        uninstall=_uninstall,
        doc="True or device types: torch.compile traces into the kernel (torch ops, wrap_triton launches), for an op with providers the one chosen (guarded); 'reference': the op's own kernel, whatever the order; eager stays one fast call",
    )
