"""The per-op ``autograd.Function`` and the Autograd dispatch kernel that applies it."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import _C

from ._record import OpRecord

_AFTER_AUTOGRAD = _C._after_autograd_keyset


class _Call:
    """Per-call facts passed to ``forward`` as the last ``apply`` input (a pytree leaf)."""

    __slots__ = ("keyset", "n_args", "kw_names")

    def __init__(self, keyset: Any, n_args: int, kw_names: tuple[str, ...]) -> None:
        self.keyset = keyset
        self.n_args = n_args
        self.kw_names = kw_names


def build_autograd_function(record: OpRecord) -> type[torch.autograd.Function]:
    """A Function whose forward runs the op below Autograd and whose backward is the user's."""
    schema = record.schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    kw_only = [a for a in schema.arguments if a.kwarg_only]
    # The dispatcher drops trailing arguments equal to their default; setup_context sees them all.
    pos_defaults = [record.signature.parameters[a.name].default for a in positional]
    kw_defaults = {a.name: record.signature.parameters[a.name].default for a in kw_only if a.has_default_value()}
    n_pos = len(positional)
    kw_index = {a.name: n_pos + i for i, a in enumerate(kw_only)}
    qualname = record.qualname
    cls_name = record.cls_name

    def forward(ctx: Any, *flat: Any) -> Any:
        call: _Call = flat[-1]
        args = flat[: call.n_args]
        kwargs = dict(zip(call.kw_names, flat[call.n_args : -1]))
        with _C._AutoDispatchBelowAutograd():
            out = record.op.redispatch(call.keyset & _AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]
        setup = record.setup_context
        if setup is not None:
            inputs = tuple(args) + tuple(pos_defaults[len(args) :])
            setup(ctx, inputs, {**kw_defaults, **kwargs}, out)
        ctx._opclass_call = call
        return out

    def backward(ctx: Any, *grads: Any) -> Any:
        if record.backward is None:
            raise RuntimeError(
                f"Trying to backward through {qualname} but no autograd formula was registered: "
                f"define setup_context and backward on {cls_name}"
            )
        call: _Call = ctx._opclass_call
        saved = ctx.needs_input_grad
        try:
            ctx.needs_input_grad = _needs_input_grad(saved[:-1], call, kw_index, n_pos)
            result = record.backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = saved
        if not isinstance(result, tuple):
            result = (result,)
        if not n_pos <= len(result) <= n_pos + len(kw_only):
            raise RuntimeError(
                f"{cls_name}.backward returned {len(result)} gradients; expected one per positional input "
                f"({n_pos})" + (f", optionally followed by keyword-only ones in order (up to {len(kw_only)})" if kw_only else "")
            )
        grads_in = list(result[: call.n_args])
        for name in call.kw_names:
            i = kw_index[name]
            grads_in.append(result[i] if i < len(result) else None)
        return (*grads_in, None)

    name = f"{cls_name}Function"
    fn_cls = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    fn_cls.__module__ = __name__
    fn_cls.__qualname__ = name
    if any(_is_list(a.type) for a in (*schema.arguments, *schema.returns)):
        from torch._library.autograd import supports_tensorlist

        fn_cls = supports_tensorlist(fn_cls)
    return fn_cls


def _is_list(t: Any) -> bool:
    return "List[" in str(t) and "Tensor" in str(t)


def _needs_input_grad(flags: tuple[Any, ...], call: _Call, kw_index: dict[str, int], n_pos: int) -> tuple[Any, ...]:
    """``needs_input_grad`` in the user's order: every positional input, then keyword-only ones."""
    if len(flags) == n_pos + len(kw_index) and call.n_args == n_pos:
        return flags
    out = list(flags[: call.n_args]) + [False] * (n_pos - call.n_args) + [False] * len(kw_index)
    for j, name in enumerate(call.kw_names):
        out[kw_index[name]] = flags[call.n_args + j]
    return tuple(out)


def make_autograd_kernel(record: OpRecord) -> Callable[..., Any]:
    """The kernel registered at the Autograd key: apply the Function only when grad is needed."""
    fn_cls = record.autograd_function
    assert fn_cls is not None
    apply: Callable[..., Any] = fn_cls.apply
    is_out = record.is_out
    opname = record.name

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if _C.is_grad_enabled() and _C._any_requires_grad(*args, **kwargs):
            if is_out:
                raise RuntimeError(
                    f"{opname}(): functions with out=... arguments don't support automatic "
                    "differentiation, but one of the arguments requires grad."
                )
            return apply(*args, *kwargs.values(), _Call(keyset, len(args), tuple(kwargs)))
        with _C._AutoDispatchBelowAutograd():
            return record.op.redispatch(keyset & _AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]

    return autograd_kernel
