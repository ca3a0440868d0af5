"""opclass's own hooks beside the kernels (:mod:`opclass.builtin_hooks.kernels`): the autograd formula,
``vmap``, ``autocast``, ``torch_dispatch`` and ``samples``; and the registration of every
built-in hook, in installation order, through the public :func:`~opclass.register_hook`.

Example:
    >>> import opclass
    >>> opclass.hooks()["vmap"].doc
    'batching rule (info, in_dims, *args) -> (output, out_dims)'
"""

from __future__ import annotations

import collections.abc
from typing import Any, Callable

import torch
from torch import _C

from opclass.core import memo
from opclass.core.compat import tagged_out
from opclass.core.names import DEVICE_TYPES
from opclass.define.hookspec import Hook, HookContext, parameters_of, positional_count, register_hook
from opclass.builtin_hooks import eager, providers, sharding, traceable
from opclass.builtin_hooks.kernels import abstract_hook, autograd_hook, composite_hook, device_hook
from opclass.errors import raised_by_torch, reraise
from opclass.install.functions import Formula
from opclass.install.record import OpRecord, live_records

# Keys holding an autograd kernel of an op's own (a formula would be shadowed or would shadow it).
_OWN_AUTOGRAD_KEYS = ("Autograd", "AutogradCPU", "AutogradCUDA", "AutogradOther", "CompositeImplicitAutograd")
_AUTOGRAD = ((_OWN_AUTOGRAD_KEYS, "an autograd kernel", "drop setup_context and backward: the op's own autograd kernel stays in charge"),)


def _check_autograd(fn: Any, ctx: HookContext) -> None:
    if tagged_out(ctx.tags):
        ctx.fail("an op tagged torch.Tag.out cannot have an autograd formula", "remove setup_context and backward")
    if written := ctx.arguments.written:
        fix = "make a functional op (return new Tensors, no mutates_args) and give it the formula"
        ctx.fail(f"the op mutates {', '.join(a.name for a in written)}, and autograd formulas are only for functional ops", fix)


def _check_setup_context(fn: Any, ctx: HookContext) -> None:
    _check_autograd(fn, ctx)
    names = list(memo.signature(fn).parameters)
    has_kw_only = bool(ctx.arguments.keyword_only)
    if has_kw_only and names == ["ctx", "inputs", "output"]:
        ctx.fail("the op has keyword-only arguments, which setup_context would not see", "write setup_context(ctx, inputs, keyword_only_inputs, output)")
    expected = ["ctx", "inputs", "keyword_only_inputs", "output"] if "keyword_only_inputs" in names or has_kw_only else ["ctx", "inputs", "output"]
    if names != expected:
        ctx.fail(f"takes ({', '.join(names)})", f"write setup_context({', '.join(expected)})")


def _check_backward(fn: Any, ctx: HookContext) -> None:
    _check_autograd(fn, ctx)
    n = positional_count(fn)
    outputs = len(ctx.schema.returns)
    if n is not None and n != 1 + outputs:
        # Count gradients, not parameters: ctx is not one, and "2 parameters, 2 outputs" reads as a match.
        took = "no parameters (not even ctx)" if n == 0 else f"ctx and {_count(n - 1, 'gradient')}"
        fix = f"write backward(ctx, {', '.join(f'grad{i}' for i in range(outputs)) or '*grads'}) with one gradient per output"
        ctx.fail(f"takes {took}, but the op has {_count(outputs, 'output')}, so backward receives {_count(outputs, 'gradient')}", fix)
    # A formula inherited from a base op returns gradients by the base's argument positions: a Tensor
    # argument the variant adds or moves (a learnable scale) would get none, with no word.
    owner = getattr(fn, "__qualname__", "").rpartition("<locals>.")[2].rpartition(".")[0]
    base = next((r for r in live_records() if r.cls_name == owner and r.hooks.get("backward") is fn), None) if owner != ctx.cls_name else None
    slots = {(b.name, b.index) for b in base.arguments if b.holds_tensor} if base is not None else set()
    if base is not None and (new := [repr(a.name) for a in ctx.arguments if a.holds_tensor and (a.name, a.index) not in slots]):
        ours = ctx.arguments.parameters()
        problem = f"is inherited from {owner}, whose formula was written for {owner}'s arguments {base.arguments.parameters()} and gives no gradient for {', '.join(new)} of {ctx.cls_name}{ours}"
        ctx.fail(problem, f"define setup_context and backward on {ctx.cls_name}, returning one gradient per input of {ours} (None for an input with no gradient)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _missing_jvp(record: OpRecord) -> str:
    return f"define jvp on {record.cls_name}"


def _install_formula(record: OpRecord, backward: Callable[..., Any]) -> None:
    # backward's install hands over the whole formula: setup_context comes with it (requires), jvp may.
    setup = record.hooks["setup_context"]
    keywords = "keyword_only_inputs" in memo.signature(setup).parameters
    record.formula = Formula(backward, setup, keywords, record.hooks.get("jvp"), missing_jvp=_missing_jvp(record), where=record.where("backward"), setup_where=record.where("setup_context"))


def _no_formula(record: OpRecord) -> None:
    # backward's fallback: a backward through the op raises, saying how to give it a formula.
    if record.formula is not None:
        return  # a hook gave one in its place (eager_autograd)
    cls = record.cls_name
    fix = (
        f"add eager_autograd = True to class {cls} (autograd then differentiates through {cls}.default, made of torch ops), or define setup_context and backward"
        if "default" in record.hooks
        else f"define {cls}.setup_context and {cls}.backward"
    )
    record.formula = Formula(missing=fix, missing_jvp=_missing_jvp(record))


def _check_jvp(fn: Any, ctx: HookContext) -> None:
    _check_autograd(fn, ctx)
    n = positional_count(fn)
    positional = ctx.arguments.positional
    if n is not None and n != 1 + len(positional):
        args = ", ".join(f"{a.name}_t" for a in positional)
        ctx.fail(f"takes {n} positional parameters, but the op has {len(positional)} positional input(s)", f"write jvp(ctx, {args}) returning the output tangent(s)")


def _check_vmap(fn: Any, ctx: HookContext) -> None:
    n = positional_count(fn)
    positional, keyword_only = ctx.arguments.positional, ctx.arguments.keyword_only
    # torch.vmap passes the op's keyword-only arguments to the rule by keyword.
    star = f", *, {', '.join(a.name for a in keyword_only)}" if keyword_only else ""
    form = f"vmap(info, in_dims, {', '.join(a.name for a in positional)}{star}) returning (output, out_dims)"
    if n is not None and n != 2 + len(positional):
        ctx.fail(f"takes {n} positional parameters", f"write {form}")
    params = parameters_of(fn)
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params):
        taken = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
        if missing := [a.name for a in keyword_only if a.name not in taken]:
            ctx.fail(f"takes no {', '.join(repr(m) for m in missing)} by keyword, which torch.vmap passes the rule by keyword", f"write {form}")


def _install_vmap(record: OpRecord, fn: Callable[..., Any]) -> None:
    assert record.op is not None
    torch.library.register_vmap(record.op, fn, lib=record.lib)


def _check_autocast(value: Any, ctx: HookContext) -> None:
    if not isinstance(value, collections.abc.Mapping) or not value:
        ctx.fail(f"must map device types to dtypes, got {value!r}", "write autocast = {'cuda': torch.float16}")
    for device_type, dtype in value.items():
        try:
            available = isinstance(device_type, str) and _C._is_autocast_available(device_type)
        except RuntimeError:  # not a device type at all
            available = False
        if not available:
            ctx.fail(f"{device_type!r} is not a device type with autocast", "use e.g. 'cpu' or 'cuda'")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            ctx.fail(f"{dtype!r} is not a floating-point dtype", "use e.g. torch.float16 or torch.bfloat16")


def _cast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == device_type and value.dtype is not torch.float64:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return value


def _install_autocast(record: OpRecord, value: dict[str, torch.dtype]) -> None:
    op = record.op
    assert record.lib is not None and op is not None
    # An argument the op writes is never cast: the kernel would write a copy, and the caller's
    # Tensor would keep its old values (torch.library.register_autocast loses such writes).
    written = frozenset(a.index for a in record.arguments.written), frozenset(a.name for a in record.arguments.written)
    for device_type, dtype in value.items():
        key = "Autocast" + _C._dispatch_key_for_device(device_type)
        where = f"{record.table.own_where(device_type) or record.qualname}, given {dtype} by {record.cls_name}.autocast"
        record.lib.impl(record.overload_name(), _autocast_kernel(op, key, device_type, dtype, written, where), key, with_keyset=True)


def _autocast_kernel(op: Any, key: str, device_type: str, dtype: torch.dtype, written: tuple[frozenset[int], frozenset[str]], where: str) -> Callable[..., Any]:
    excluded = _C.DispatchKeySet(getattr(_C.DispatchKey, key))
    at, named = written
    fix = f"the kernel cannot take {dtype}: leave {device_type} out of the op's autocast, or convert inside the kernel (x.float())"

    def autocast_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        # Unlike torch.library.register_autocast, keyword arguments are cast too, not rejected.
        cast_args = [v if i in at else _cast(v, device_type, dtype) for i, v in enumerate(args)]
        cast_kwargs = {k: v if k in named else _cast(v, device_type, dtype) for k, v in kwargs.items()}
        try:
            with _C._ExcludeDispatchKeyGuard(excluded):
                return op(*cast_args, **cast_kwargs)
        except Exception as e:
            if not raised_by_torch(e):
                raise
            reraise(e, where, fix if "unsupported ScalarType" in str(e) else "")

    return autocast_kernel


def _check_torch_dispatch(value: Any, ctx: HookContext) -> None:
    if not isinstance(value, collections.abc.Mapping) or not value:
        ctx.fail(f"must map Tensor subclasses or TorchDispatchModes to rules, got {value!r}", "write torch_dispatch = {MyMode: rule}")
    for key, rule in value.items():
        if not isinstance(key, type) or not callable(rule):
            ctx.fail(f"entry {key!r}: {rule!r} is not a class and a callable", "map a class to rule(mode_or_cls, func, types, args, kwargs)")


def install_torch_dispatch(record: OpRecord, value: dict[type, Callable[..., Any]]) -> None:
    for cls, rule in value.items():
        torch.library.register_torch_dispatch(record.qualname, cls, rule, lib=record.lib)


def _check_samples(fn: Any, ctx: HookContext) -> None:
    params = parameters_of(fn) or []
    if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        fix = "write samples() with no parameters, returning or yielding opclass.testing.Sample(args, kwargs) or tuples of arguments"
        ctx.fail(f"takes ({', '.join(p.name for p in params)}), but it is called with no arguments", fix)


def _metadata(record: OpRecord, value: Any) -> None:
    """Nothing to install: ``record.hooks`` holds it for its readers (backward's install, opclass.decompositions, opclass.testing)."""


def _autocast_keys(value: Any) -> list[tuple[tuple[str, ...], str, str]]:
    found: list[tuple[tuple[str, ...], str, str]] = []
    for device_type in value if isinstance(value, dict) else ():
        try:
            key = "Autocast" + _C._dispatch_key_for_device(device_type)
        except (RuntimeError, TypeError):
            continue  # the hook's own check names a bad device type
        found.append(((key,), f"an autocast kernel for {device_type}", f"drop {device_type!r} from autocast"))
    return found


def register_builtin_hooks() -> None:
    """Register opclass's hooks (import time). Order is installation order."""
    for device_type in (None, *DEVICE_TYPES):
        register_hook(device_hook(device_type))
    for make in (abstract_hook, composite_hook, autograd_hook):
        register_hook(make())
    for name, install, check, requires, doc, aliases, fallback in (
        ("setup_context", _metadata, _check_setup_context, ("backward",), "save what backward needs: (ctx, inputs, output)", ("setup_ctx", "save_for_backward"), None),
        ("backward", _install_formula, _check_backward, ("setup_context",), "gradients of the inputs: (ctx, *grads)", ("backwards", "bwd"), _no_formula),
        ("jvp", _metadata, _check_jvp, ("setup_context",), "forward-mode AD: (ctx, *input_tangents) -> output tangent(s)", (), None),
    ):
        register_hook(Hook(name, install, check=check, requires=requires, doc=doc, occupies=lambda value: _AUTOGRAD, aliases=aliases, fallback=fallback))
    register_hook(eager.eager_autograd_hook())
    batching = ((("FuncTorchBatched",), "a batching rule", "drop vmap: the op's own rule stays in charge"),)
    register_hook(Hook("vmap", _install_vmap, check=_check_vmap, doc="batching rule (info, in_dims, *args) -> (output, out_dims)", occupies=lambda value: batching, aliases=("batch_rule",), arguments_from=2))
    register_hook(Hook("autocast", _install_autocast, check=_check_autocast, staticmethod=False, doc="dict device type -> dtype: cast floating inputs under autocast", occupies=_autocast_keys))
    register_hook(Hook("torch_dispatch", install_torch_dispatch, check=_check_torch_dispatch, staticmethod=False, doc="dict Tensor subclass / TorchDispatchMode -> rule"))
    register_hook(sharding.sharding_hook())
    register_hook(Hook("reference", _metadata, kernel=True, doc="the op in torch ops, for opclass.decompositions(): what deployment decomposes it into", aliases=("decompose", "ref")))
    register_hook(Hook("samples", _metadata, check=_check_samples, doc="representative inputs for opclass.testing: () -> Sample or args tuples"))
    register_hook(traceable.traceable_hook())  # after the kernel hooks: it replaces their kernels
    register_hook(providers.providers_hook())  # after traceable: the op's own kernels are candidates as traced
    register_hook(providers.provider_orders_hook())
