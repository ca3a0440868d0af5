"""An op's ``autograd.Function`` classes: the Autograd kernel's, and the fast path's per device.

Most ops of a library are never differentiated, and a Function class (with its Backward class)
is among the dearer objects to make: they are made on the op's first need, all together.

Example:
    >>> from opclass.install.functions import Call
    >>> Call(None, 1, ()).kernel is None  # what the fast path's Functions get: no kernel chosen
    True
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import _C

from opclass.core import native
from opclass.core.shield import shield
from opclass.errors import raised_by_torch, reraise
from opclass.core.types import element_of, holds_tensor, inner, returns_of
from opclass.install.outputs import output_is_fresh

if TYPE_CHECKING:
    from opclass.install.record import OpRecord
    from opclass.install.table import Kernel

__all__ = ["Call", "Formula", "Functions", "functions", "functorch_entry", "AFTER_AUTOGRAD"]

AFTER_AUTOGRAD = _C._after_autograd_keyset
_MAKE = threading.Lock()


@dataclasses.dataclass(slots=True, eq=False)
class Call:
    """Per-call facts passed to ``forward`` as the last ``apply`` input (a pytree leaf): the
    dispatcher's key set (``None`` on the eager fast path), the counts of positional arguments
    and the keyword names passed, and the backend kernel the fast path already chose."""

    keyset: Any
    n_args: int
    kw_names: tuple[str, ...]
    kernel: Callable[..., Any] | None = None


@dataclasses.dataclass(frozen=True)
class Formula:
    """An op's autograd formula, as the hooks that give one hand it over: ``backward(ctx, *grads)``,
    ``setup_context(ctx, inputs, output)`` (or with ``setup_keywords``, ``(ctx, inputs,
    keyword_only_inputs, output)``) and ``jvp(ctx, *tangents)``. Where one is missing, ``missing``
    / ``missing_jvp`` says how to give it, in the error a backward / forward-mode AD raises."""

    backward: Callable[..., Any] | None = None
    setup_context: Callable[..., Any] | None = None
    setup_keywords: bool = False
    jvp: Callable[..., Any] | None = None
    missing: str = ""
    missing_jvp: str = ""
    #: How errors name the hook whose ``backward`` returned a wrong result, and ``setup_context``.
    where: str = ""
    setup_where: str = ""


@dataclasses.dataclass(slots=True, eq=False)
class Functions:
    """An op's Functions: ``generic``, which the dispatcher's Autograd kernel applies (its forward
    redispatches below autograd), and ``fast``, by device type, which the eager fast path applies
    (its forward calls that device's kernel, nothing else; ops without keyword-only arguments)."""

    generic: type[torch.autograd.Function]
    fast: dict[str, type[torch.autograd.Function]]


def functions(record: OpRecord) -> Functions:
    """``record``'s Functions, made on first need (once, whichever thread asks first)."""
    made = record.functions
    if made is None:
        with _MAKE:
            made = record.functions
            if made is None:
                generic, make_fast = _formulas(record)
                plan = record.plan
                fast = plan.kernels if plan is not None and plan.grad == "function" and not record.arguments.keyword_only else {}
                made = record.functions = Functions(generic, {d: make_fast(k) for d, k in fast.items()})
    return made


def functorch_entry(record: OpRecord) -> Callable[..., Any]:
    """The op's call while torch.func transforms are active (from the class call, never from
    inside the dispatcher, where functorch's handling of Functions cannot run). A grad/jvp level
    on top applies the generic Function; vmap levels reach the op's batching rule."""

    def functorch_call(*args: Any, **kwargs: Any) -> Any:
        if _C._are_functorch_transforms_active() and top_level_differentiates():
            return functions(record).generic.apply(*args, *kwargs.values(), Call(None, len(args), tuple(kwargs)))
        return record.op(*args, **kwargs)  # type: ignore[misc]

    return functorch_call


def _formulas(record: OpRecord) -> tuple[type[torch.autograd.Function], Callable[[Kernel], type[torch.autograd.Function]]]:
    """The op's generic Function, and ``make_fast(kernel)``, which makes a fast one."""
    positional, kw_only = record.arguments.positional, record.arguments.keyword_only
    # The dispatcher drops trailing arguments equal to their default; setup_context sees them all.
    pos_defaults = tuple(a.default for a in positional)
    kw_defaults = {a.name: a.default for a in kw_only if a.has_default}
    n_pos = len(positional)
    # backward may stop after the arguments a caller can pass (torch's convention), so at the
    # first of the trailing defaulted ones.
    required = max((a.index + 1 for a in positional if not a.has_default), default=0)
    kw_index = {a.name: n_pos + i for i, a in enumerate(kw_only)}
    qualname, cls_name = record.qualname, record.cls_name
    formula = record.formula or Formula()
    # The user's setup_context, called in its own form (no adapter frame).
    user_setup, setup_kw, user_backward_fn, user_jvp = formula.setup_context, formula.setup_keywords, formula.backward, formula.jvp
    fresh, single, finish = output_is_fresh(), record.outputs.single, record.outputs.finish
    # below(fn, *args, **kwargs): fn run with autograd keys excluded, as a kernel runs in the Autograd kernel.
    module = native.native_module()
    below = module.call_below_autograd if module is not None else _below
    below_guard = None if module is not None else _C._AutoDispatchBelowAutograd
    entry: Callable[..., Any] = record.functorch_entry or record.op  # type: ignore[assignment]

    where = formula.where or f"{qualname} ({cls_name})"
    setup_where = formula.setup_where or where

    def setup_failed(e: Exception) -> None:
        if not raised_by_torch(e):
            raise e
        reraise(e, setup_where)

    def check_saved(ctx: Any) -> None:
        # torch checks what save_for_backward got only after setup_context returns, naming neither.
        for i, t in enumerate(getattr(ctx, "to_save", None) or ()):
            if t is not None and not isinstance(t, torch.Tensor):
                raise TypeError(
                    f"{setup_where}: save_for_backward can only save variables, but argument {i} is of type {torch.typename(t)}; "
                    "save Tensors (or None) only, and keep any other value on ctx (ctx.shape = x.shape)"
                )

    n_kw = len(kw_only)
    # What a gradient may be for: schema types with no Tensor in them take None only.
    not_tensors = [(i, a.name, a.jit) for i, a in enumerate((*positional, *kw_only)) if not a.holds_tensor]
    # Tensor-list arguments or returns. torch's Tensor-list support wants a list of gradients for a
    # list of Tensors, and reads an empty list of anything as one: None for the whole list becomes
    # one None per element.
    lists = any(inner(t)[2] and holds_tensor(t) for t in (*(a.jit for a in record.arguments), *returns_of(record.schema)))
    # List arguments: position (keyword-only: name) -> whether it holds Tensors.
    pos_lists = {a.index: a.holds_tensor for a in positional if element_of(a.jit) is not None} if lists else {}
    kw_lists = {a.name: a.holds_tensor for a in kw_only if element_of(a.jit) is not None} if lists else {}

    remembers = n_pos > required or bool(pos_lists)

    def remember(ctx: Any, args: tuple[Any, ...]) -> None:
        if n_pos > required:
            # The positional arguments passed, as the dispatcher counts them: trailing ones equal
            # to their default are left out.
            n = len(args)
            while n > required and _is_default(args[n - 1], pos_defaults[n - 1]):
                n -= 1
            ctx._opclass_passed = n
        if pos_lists:
            ctx._opclass_lists = tuple(
                (i, len(args[i])) for i, tensors in pos_lists.items() if i < len(args) and type(args[i]) in (list, tuple) and (tensors or not args[i])
            )

    def user_backward(ctx: Any, grads: tuple[Any, ...]) -> tuple[Any, ...]:
        if user_backward_fn is None:
            raise RuntimeError(f"Trying to backward through {qualname} ({cls_name}), but no autograd formula was registered" + (f": {formula.missing}" if formula.missing else ""))
        raw = user_backward_fn(ctx, *grads)
        result: tuple[Any, ...] = raw if isinstance(raw, tuple) else (raw,)
        n, given = len(result), getattr(ctx, "_opclass_passed", n_pos)
        if n == given and n < n_pos:
            # torch's convention (custom_op code): gradients for the arguments passed only.
            result += (None,) * (n_pos - n)
        elif n not in (n_pos, n_pos + n_kw):
            counts = f"one per argument passed ({given}) or one per positional input ({n_pos})" if given < n_pos else f"one per positional input ({n_pos})"
            raise RuntimeError(
                f"{where} returned {n} gradients; expected {counts}"
                + (f", optionally followed by one per keyword-only input ({n_pos + n_kw} in all)" if kw_only else "")
                + ": return None for an input with no gradient"
            )
        # Keyword-only gradients may be left off, but not one an input needs: only None says "none".
        needed = zip(kw_only, ctx.needs_input_grad[n_pos:]) if n_kw and len(result) == n_pos else ()
        if missing := [repr(a.name) for a, needs in needed if (any(needs) if isinstance(needs, (list, tuple)) else needs)]:
            raise RuntimeError(
                f"{where} returned no gradient for the keyword-only {', '.join(missing)}, which require{'s' * (len(missing) == 1)} grad: "
                f"return one gradient per input, keyword-only ones last ({n_pos + n_kw} in all), None for an input with no gradient"
            )
        for i, name, kind in not_tensors:
            if i < len(result) and result[i] is not None:
                raise RuntimeError(
                    f"{where} returned a gradient for {name!r} (gradient {i + 1} of {len(result)}), which is {kind}, not a Tensor: "
                    f"return None for {name!r}"
                )
        for i, length in getattr(ctx, "_opclass_lists", ()):
            if result[i] is None:
                result = (*result[:i], [None] * length, *result[i + 1 :])
        return result

    # setup_context style (forward takes no ctx): what torch.func transforms require.
    def forward(*flat: Any) -> Any:
        call: Call = flat[-1]
        args = flat[: call.n_args]
        kwargs = dict(zip(call.kw_names, flat[call.n_args : -1]))
        if call.kernel is not None:  # the fast path, for ops with keyword-only arguments
            # The checked kernel: outputs already checked and converted.
            return below(call.kernel, *args, **kwargs)
        if call.keyset is None:
            # Under torch.func: the level above was just taken care of; the op meets the
            # levels below (or none) afresh.
            return entry(*args, **kwargs)
        with _C._AutoDispatchBelowAutograd():
            return record.op.redispatch(call.keyset & AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]

    def setup_context(ctx: Any, flat: tuple[Any, ...], out: Any) -> None:
        call: Call = flat[-1]
        if remembers:
            remember(ctx, flat[: call.n_args])
        if kw_lists:
            ctx._opclass_kw_lists = {
                n: len(v) for n, v in zip(call.kw_names, flat[call.n_args : -1]) if n in kw_lists and type(v) in (list, tuple) and (kw_lists[n] or not v)
            }
        if user_setup is not None:
            inputs = flat[: call.n_args] + pos_defaults[call.n_args :]
            given = (inputs, {**kw_defaults, **dict(zip(call.kw_names, flat[call.n_args : -1]))}, out) if setup_kw else (inputs, out)
            try:
                user_setup(ctx, *given)
            except Exception as e:
                setup_failed(e)
            check_saved(ctx)
        ctx._opclass_call = call

    def jvp(ctx: Any, *tangents: Any) -> Any:
        call: Call = ctx._opclass_call
        if user_jvp is None:
            raise RuntimeError(f"Trying to use forward-mode AD with {qualname} but no forward-mode formula was registered" + (f": {formula.missing_jvp}" if formula.missing_jvp else ""))
        # One tangent per positional input (None past those given), as backward returns grads.
        return user_jvp(ctx, *tangents[: call.n_args], *(None,) * (n_pos - call.n_args))

    def backward(ctx: Any, *grads: Any) -> Any:
        call: Call = ctx._opclass_call
        saved = ctx.needs_input_grad
        try:
            ctx.needs_input_grad = _needs_input_grad(saved[:-1], call, kw_index, n_pos)
            result = user_backward(ctx, grads)
        finally:
            ctx.needs_input_grad = saved
        for i in range(call.n_args, n_pos):
            if result[i] is not None:
                # Left out by the dispatcher (equal to its default, so no Tensor): what torch says
                # when the fast path, which passes it, gets a gradient for it.
                raise RuntimeError(
                    f"function {cls_name}FunctionBackward returned a gradient different than None at position "
                    f"{i + 1}, but the corresponding forward input was not a Variable"
                )
        grads_in = list(result[: call.n_args])
        kw_lengths = getattr(ctx, "_opclass_kw_lists", {})
        for name in call.kw_names:
            i = kw_index[name]
            grad = result[i] if i < len(result) else None
            grads_in.append([None] * kw_lengths[name] if grad is None and name in kw_lengths else grad)
        return (*grads_in, None)

    def fast_function(k: Kernel) -> type[torch.autograd.Function]:
        # Aliasing errors name the hook whose kernel ran, as on the dispatcher path.
        kernel, k_where = k.user, k.where

        def fast_forward(ctx: Any, *args: Any) -> Any:
            # The kernel sees what it sees on the dispatcher path: autograd below it (the guard
            # object inline without the native guard: one Python frame less than below()).
            if below_guard is None:
                out = below(kernel, *args)
            else:
                with below_guard():
                    out = kernel(*args)
            if not (single and fresh(out)):
                out = finish(k_where, args, {}, out)
            if remembers:
                remember(ctx, args)
            if user_setup is not None:  # inline: no frame and no keyword dict per call beyond the user's own
                try:
                    user_setup(ctx, args, {}, out) if setup_kw else user_setup(ctx, args, out)
                except Exception as e:
                    setup_failed(e)
                if getattr(ctx, "to_save", None):
                    check_saved(ctx)
            return out

        def fast_backward(ctx: Any, *grads: Any) -> Any:
            return user_backward(ctx, grads)

        # Same class name as the dispatcher's Function: grad_fn reads the same on both paths.
        return _function_class(f"{cls_name}Function", fast_forward, fast_backward, lists, f"{cls_name}Function[{k.hook}]")

    def vmap(info: Any, in_dims: tuple[Any, ...], *flat: Any) -> Any:
        # A vmap level under a grad/jvp level: batch the op itself (its vmap hook, or torch's
        # per-sample fallback), under a vmap of our own.
        call: Call = flat[-1]

        def one(*values: Any) -> Any:
            return entry(*values[: call.n_args], **dict(zip(call.kw_names, values[call.n_args :])))

        out = torch.vmap(one, in_dims=tuple(in_dims[:-1]), randomness=info.randomness)(*flat[:-1])
        return out, (0,) * len(out) if isinstance(out, tuple) else 0

    if not lists:
        return _function_class(f"{cls_name}Function", forward, backward, False, setup_context=setup_context, jvp=jvp, vmap=vmap), fast_function

    # torch's supports_tensorlist wraps only forward(ctx, ...)-style Functions: Tensor-list ops
    # keep that style, and so get no torch.func transforms and no jvp.
    def forward_with_ctx(ctx: Any, *flat: Any) -> Any:
        out = forward(*flat)
        setup_context(ctx, flat, out)
        return out

    return _function_class(f"{cls_name}Function", forward_with_ctx, backward, True), fast_function


def _function_class(name: str, forward: Callable[..., Any], backward: Callable[..., Any], lists: bool, qualname: str | None = None, **extra: Callable[..., Any]) -> type[torch.autograd.Function]:
    # torch's autograd.Function method names, given as keywords.
    body: dict[str, Any] = {k: staticmethod(shield(v)) for k, v in dict(extra, forward=forward, backward=backward).items()}
    fn_cls = type(name, (torch.autograd.Function,), {**body, "__module__": __name__, "__qualname__": qualname or name})
    if lists:
        from torch._library.autograd import supports_tensorlist

        fn_cls = supports_tensorlist(fn_cls)
    return fn_cls


def top_level_differentiates() -> bool:
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
    from torch._C._functorch import TransformType

    return retrieve_current_functorch_interpreter().key() in (TransformType.Grad, TransformType.Jvp)


def _below(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The native guard's ``call_below_autograd`` in Python."""
    with _C._AutoDispatchBelowAutograd():
        return fn(*args, **kwargs)


def _is_default(value: Any, default: Any) -> bool:
    """``value`` equals the schema default ``default`` (as the dispatcher compares them)."""
    if value is None or default is None or isinstance(value, torch.Tensor):
        return value is default
    if isinstance(value, (list, tuple)):
        return isinstance(default, (list, tuple)) and list(value) == list(default)
    try:
        return bool(value == default)
    except Exception:  # noqa: BLE001 - a value that cannot be compared is not the default
        return False


def _needs_input_grad(flags: tuple[Any, ...], call: Call, kw_index: dict[str, int], n_pos: int) -> tuple[Any, ...]:
    """``needs_input_grad`` in the user's order: every positional input, then keyword-only ones."""
    if len(flags) == n_pos + len(kw_index) and call.n_args == n_pos:
        return flags
    out = list(flags[: call.n_args]) + [False] * (n_pos - call.n_args) + [False] * len(kw_index)
    for j, name in enumerate(call.kw_names):
        out[kw_index[name]] = flags[call.n_args + j]
    return tuple(out)
