"""Eager-autograd ops: ``eager_autograd = True`` differentiates through the kernel itself.

In eager mode the kernel (made of differentiable torch ops) runs with autograd on, so training
needs no ``backward``. Wherever a TorchDispatchMode is tracing (torch.compile, torch.export,
FakeTensor) the op stays one opaque node; if grad is needed there, its backward is a second
opaque op, ``ns::<name>_eager_backward``, whose kernel re-runs the kernel under autograd and
differentiates it (recompute, as activation checkpointing does). So compiled graphs never look
inside the kernel, and data-dependent Python in it (``if x.mean() > 0``) keeps working. Where
providers choose, the forward also saves which providers were in force (``opclass_eager::providers``),
and the recompute runs the provider they choose, whatever is in force when the backward runs.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C

from opclass.core.compat import tagged_inplace, tagged_out
from opclass.core.types import returns_of
from opclass.define.hookspec import Hook, HookContext
from opclass.define.schema import op_exists
from opclass.errors import raised_by_torch, reraise
from opclass.install import orders
from opclass.install.functions import AFTER_AUTOGRAD, Call, Formula, functions, top_level_differentiates
from opclass.install.outputs import output_is_fresh
from opclass.install.own_kernels import plain_keysets
from opclass.install.record import OpRecord, lookup
from opclass.install.table import Kernel

# What the dispatcher excludes below its Autograd kernels; the recompute must undo it.
_AUTOGRAD_EXCLUSIONS = (
    _C.DispatchKeySet(_C.DispatchKey.AutogradFunctionality)
    .add(_C.DispatchKey.AutogradOther)
    .add(_C.DispatchKey.AutogradNestedTensor)
    .add(_C.DispatchKey.ADInplaceOrView)
    .raw_repr()
)
_GRADS = "opclass_grad_outputs"
_NEEDS = "opclass_needs_input_grad"
#: Each (order, mode) an opaque forward of an op with providers ran under, numbered in first-seen order.
_STATES: list[tuple[tuple[str, ...] | None, frozenset[str]]] = []
_PROVIDERS: list[Any] = []  # the op that numbers them, and its library, once made
_LOCK = threading.Lock()


def eager_autograd_hook() -> Hook:
    """The ``eager_autograd`` hook (see the module docstring).

    Example:
        >>> import opclass
        >>> opclass.hooks()["eager_autograd"].staticmethod
        False
    """
    return Hook("eager_autograd", _install, check=_check, staticmethod=False, doc="True: eager autograd differentiates through the kernel; compile/export see one opaque op")


def _check(value: Any, ctx: HookContext) -> None:
    if type(value) is not bool:
        ctx.fail(f"must be True or False, got {value!r}", "write eager_autograd = True")
    if not value:
        return
    if ctx.existing:
        ctx.fail("differentiates through opclass's own kernels, and this op was defined elsewhere", "give the op setup_context and backward instead")
    if written := [h for h in ("setup_context", "backward", "jvp") if h in ctx.defined]:
        ctx.fail(
            f"differentiates through the kernel, but the class also defines {', '.join(written)}",
            "keep either eager_autograd = True or the formula (setup_context + backward), not both",
        )
    if tagged_out(ctx.tags) or tagged_inplace(ctx.tags):
        ctx.fail("is for functional ops, and this op is tagged inplace/out", "drop the tag, or write setup_context and backward")
    if mutated := [a.name for a in ctx.arguments.written]:
        ctx.fail(f"is for functional ops, and this op mutates {', '.join(mutated)}", "return new Tensors instead of writing to inputs")
    returns = list(returns_of(ctx.schema))
    if not returns or any(r != "Tensor" for r in returns):
        ctx.fail(f"needs an op that returns Tensors, and this one returns ({', '.join(returns)})", "return a Tensor or a tuple of Tensors")
    if any(a.name in (_GRADS, _NEEDS) for a in ctx.arguments):
        ctx.fail(f"cannot be used with a parameter named {_GRADS} or {_NEEDS}", "rename the parameter")
    qualname, _, overload = ctx.qualname.partition(".")
    backward = f"{qualname}_eager_backward"
    live = lookup(ctx.qualname)
    # A live eager_autograd op of this name owns the backward op: taken by it, not by another.
    if (live is None or "eager_autograd" not in live.hooks) and op_exists(backward, overload):
        ctx.fail(f"defines the op's backward op {backward}, and that name is taken by another op", f"give the op another name, or remove {backward}")


def _install(record: OpRecord, value: bool) -> None:
    if not value:
        return
    record.differentiates_kernel = check_differentiable
    record.autograd_kernel = eager_autograd_kernel
    record.functorch_entry = direct_entry(record)
    text = record.schema_str
    params = text[1 : text.rindex(") ->")].strip()
    extra = f"{'' if record.arguments.keyword_only else '*, '}Tensor[] {_GRADS}, bool[] {_NEEDS}"
    base = f"{record.name}_eager_backward"
    name = base + (f".{record.overload}" if record.overload else "")
    record.lib.define(f"{name}({params + ', ' if params else ''}{extra}) -> Tensor[]", tags=tuple(t for t in record.defined_tags if t == torch.Tag.pt2_compliant_tag))
    record.lib.impl(name, _recompute_kernel(record), "CompositeExplicitAutograd")
    record.lib._register_fake(name, _fake_backward(record), _stacklevel=1)
    backward_op = getattr(getattr(getattr(torch.ops, record.namespace), base), record.overload or "default")
    # The formula the op's autograd.Function runs where the op must stay opaque.
    record.formula = Formula(_call_backward_op(record, backward_op), _save_inputs(record), True, where=record.where("eager_autograd"))


def _save_inputs(record: OpRecord) -> Callable[..., None]:
    def setup_context(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any], output: Any) -> None:
        ctx.opclass_inputs = (inputs, keyword_only_inputs)
        ctx.opclass_needs = [t.requires_grad for t in record.arguments.tensors(inputs, keyword_only_inputs)]
        ctx.opclass_providers = [_providers_op()(record.qualname)] if record.table.has_providers else []

    return setup_context


def _call_backward_op(record: OpRecord, backward_op: Any) -> Callable[..., Any]:
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        inputs, kw = ctx.opclass_inputs
        needs: list[bool] = ctx.opclass_needs
        flat = iter(backward_op(*inputs, **kw, **{_GRADS: [*grads, *ctx.opclass_providers], _NEEDS: needs}) if any(needs) else ())
        need = iter(needs)

        def take(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                return next(flat) if next(need) else None
            if isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v):
                return [take(t) for t in v]
            return None

        return (*(take(v) for v in inputs), *(take(kw[a.name]) for a in record.arguments.keyword_only if a.name in kw))

    return backward


def _kernel_for(record: OpRecord, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Kernel | None:
    """The kernel for the inputs' device (``None``: no Tensor, or no kernel for that device). Where
    providers choose, the dispatcher's kernel, which makes the calling context's choice."""
    device = record.arguments.device_of(args, kwargs)
    found = record.kernel_for(device) if device is not None else None
    return dataclasses.replace(found, user=found.checked) if found is not None and found.choice is not None else found


def _providers_op() -> Any:
    """``opclass_eager::providers(str op) -> Tensor``: the number of the providers in force for
    ``op`` (its order and the mode). Effectful: a compiled graph runs it in the forward and saves
    its answer, where a pure op would be moved into the backward, under other providers."""
    with _LOCK:
        if not _PROVIDERS:
            lib = torch.library.Library("opclass_eager", "FRAGMENT")
            lib.define("providers(str op) -> Tensor")
            lib.impl("providers", _number, "CompositeExplicitAutograd")
            lib._register_fake("providers", lambda op: torch.empty((), dtype=torch.long))
            # This module's spelling is the one torch 2.11 to 2.15 all have.
            from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

            _register_effectful_op(torch.ops.opclass_eager.providers.default, _EffectType.ORDERED)
            _PROVIDERS.extend((torch.ops.opclass_eager.providers.default, lib))
    return _PROVIDERS[0]


def _number(op: str) -> torch.Tensor:
    state = orders.current()
    key = (state.orders.get(op), state.mode)
    with _LOCK:
        if key not in _STATES:
            _STATES.append(key)
        return torch.tensor(_STATES.index(key))


def _recompute_kernel(record: OpRecord) -> Callable[..., Any]:
    def eager_backward(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
        grads: list[torch.Tensor] = kwargs.pop(_GRADS)
        needs = iter(kwargs.pop(_NEEDS))
        kernel = _kernel_for(record, args, kwargs)
        if kernel is None:
            raise NotImplementedError(f"{record.qualname}_eager_backward: {record.cls_name} has no kernel for these inputs' device")
        if len(grads) > record.outputs.n_returns:  # the providers in force in the forward choose
            order, mode = _STATES[int(grads.pop())]
            device = record.arguments.device_of(args, kwargs)
            choice = record.table.choice(device if device in record.table.kernels else None, orders.State({record.qualname: order} if order else {}, mode))
            kernel = dataclasses.replace(kernel, user=choice.run)
        leaves: list[torch.Tensor] = []

        def leaf(v: Any) -> Any:
            if isinstance(v, torch.Tensor):
                t = v.detach()
                if next(needs):
                    t.requires_grad_()
                    leaves.append(t)
                return t
            if isinstance(v, list):
                return [leaf(t) for t in v]
            return v

        args = tuple(leaf(v) for v in args)
        kwargs = {a.name: leaf(kwargs[a.name]) for a in record.arguments if a.name in kwargs}
        # The dispatcher runs this kernel below autograd; the recompute needs autograd back on.
        excluded = _C.DispatchKeySet.from_raw_repr(_C._dispatch_tls_local_exclude_set().raw_repr() & ~_AUTOGRAD_EXCLUSIONS)
        with _C._ForceDispatchKeyGuard(_C._dispatch_tls_local_include_set(), excluded), torch.enable_grad():
            out = kernel.user(*args, **kwargs)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
            found: tuple[torch.Tensor | None, ...] = (None,) * len(leaves)
            if pairs and leaves:
                found = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
        return [g if g is not None else torch.zeros_like(t) for g, t in zip(found, leaves)]

    return eager_backward


def _fake_backward(record: OpRecord) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
        # tensors() reads the op's own arguments only, not the two this op adds.
        return [torch.empty_like(t) for t, n in zip(record.arguments.tensors(args, kwargs), kwargs[_NEEDS]) if n]

    return fake


def check_differentiable(where: str, out: Exception) -> None:
    """Raise the exception the kernel raised with autograd on, naming the op and the kernel where
    torch raised it. (An output that needs no grad passes: plain torch gives the same function's
    output so, ``x.new_zeros`` or an input left unused.)"""
    if not raised_by_torch(out):
        raise out
    inplace = "in-place operation" in str(out) or "inplace operation" in str(out)
    reraise(out, where, "eager_autograd differentiates through the kernel, which must not write to its inputs: write to a copy (x = x.clone() first)" if inplace else "")


def direct_entry(record: OpRecord) -> Callable[..., Any]:
    """The op as its kernel, called with autograd on (torch.func transforms, dual tensors)."""

    def eager_entry(*args: Any, **kwargs: Any) -> Any:
        # A vmap level on top batches the opaque op (its vmap hook or torch's per-sample
        # fallback), so data-dependent kernels still work; grad/jvp levels see the kernel.
        found = _kernel_for(record, args, kwargs) if top_level_differentiates() else None
        return record.op(*args, **kwargs) if found is None else found.user(*args, **kwargs)  # type: ignore[misc]

    return eager_entry


def eager_autograd_kernel(record: OpRecord) -> Callable[..., Any]:
    """The Autograd kernel of an eager-autograd op. Grad needed: the kernel run with autograd on,
    or under a TorchDispatchMode (tracing) the Function, whose forward stays opaque and whose
    backward is the backward op. No grad: the backend kernel, as for any op."""
    plain = plain_keysets(record)
    fresh, single, finish = output_is_fresh(), record.outputs.single, record.outputs.finish
    modes = _C._len_torch_dispatch_stack
    op = record.op
    assert op is not None

    def eager_autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        grad = _C.is_grad_enabled() and _C._any_requires_grad(*args, **kwargs)
        if grad or _forward_ad._current_level >= 0:
            found = _kernel_for(record, args, kwargs) if not modes() else None
            if found is not None:
                try:
                    out = found.user(*args, **kwargs)
                except Exception as e:
                    if not grad:
                        raise
                    check_differentiable(found.where, e)
                if not (single and fresh(out)):
                    out = finish(found.where, args, kwargs, out)
                return out
            if grad:
                call_keyset = None if _C._are_functorch_transforms_active() else keyset
                # Under a mode only (tracing): the Function is created on first need.
                return functions(record).generic.apply(*args, *kwargs.values(), Call(call_keyset, len(args), tuple(kwargs)))
        backend = plain.get(keyset.raw_repr())
        if backend is not None:
            return backend(*args, **kwargs)
        with _C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & AFTER_AUTOGRAD, *args, **kwargs)

    return eager_autograd_kernel
