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
"""

from __future__ import annotations

import collections.abc
from typing import Any, Callable, Iterator

import torch
from torch import _C
from torch._library import triton as _torch_triton
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

from opclass.core.shield import eager_kernel
from opclass.define.hookspec import Hook, HookContext
from opclass.errors import raised_by_torch, reraise
from opclass.install.fake import register_fake
from opclass.install.record import OpRecord

__all__ = ["traceable_hook"]

_HOOK = "traceable"


def _check(value: Any, ctx: HookContext) -> None:
    if value is False:
        return
    if value is not True and not (isinstance(value, (tuple, list, set, frozenset)) and value and all(isinstance(d, str) for d in value)):
        ctx.fail(f"must be True, False or device types like ('cuda',), got {value!r}", "write traceable = True")
    for device in () if value is True else value:
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


def _decomposition_rule(record: OpRecord, traced: dict[str | None, Callable[..., Any]]) -> Callable[..., Any]:
    """The FunctionalTensorMode rule: run the traced kernel under the mode (torch's triton_op
    ``functional_decomp``), or keep the op as one node for untraced devices and torch.export. An
    op with providers traces the provider the call would run, chosen now (the graph keeps it)."""
    default = traced.get(None)

    def functional_decomposition(mode: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from torch.export._trace import custom_triton_ops_decomposition_disabled

        if custom_triton_ops_decomposition_disabled():
            return mode.__torch_dispatch__(func, types, args, kwargs)
        if any(t not in (torch.Tensor, FunctionalTensor) and not issubclass(t, torch._subclasses.FakeTensor) for t in types):
            return NotImplemented  # another Tensor subclass: its own __torch_dispatch__ goes first
        device = record.arguments.device_of(args, kwargs)
        fn = traced.get(device, default)
        table = record.table
        if fn is not None and table.has_providers:
            chosen, table.traced = table.now(device if device in table.kernels else None).pick(args, kwargs), True
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
    traced = own if value is True else {device: own[device] if device in own else own[None] for device in value}
    # Eager calls of a traced kernel (and of every provider) launch Triton directly.
    record.table.wrap(lambda e: eager_kernel(e.fn) if not e.own or e in traced.values() else None)
    by_device = {device: e.raw for device, e in traced.items()}
    torch.library.register_torch_dispatch(record.qualname, FunctionalTensorMode, _decomposition_rule(record, by_device), lib=record.lib)
    if record.fake is None and record.schema.returns and not (record.is_inplace or record.is_out):
        register_fake(record, _fake_kernel(record, by_device), record.where(_HOOK))
    table: dict[str, Any] = _torch_triton.triton_ops_to_kernels
    if not isinstance(table.get(_table_key(record)), _InnerKernels):
        table[_table_key(record)] = _InnerKernels()
    table[_table_key(record)].kernels[record.qualname] = (record, list(by_device.values()))


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
        doc="True or device types: torch.compile traces into the kernel (torch ops, wrap_triton launches); eager stays one fast call",
    )
