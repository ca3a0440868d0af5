"""The per-op ``autograd.Function`` and the Autograd dispatch kernel that applies it."""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C

from . import _memo, _native
from ._alias import check_outputs, output_is_fresh
from ._plan import FAST_DEVICES
from ._record import Kernel, OpRecord
from ._returns import converter, exact_predicate
from ._shield import shield

_AFTER_AUTOGRAD = _C._after_autograd_keyset
_ADIV = _C.DispatchKey.ADInplaceOrView
# Creating the autograd.Function classes (each with its Backward class) and the closures behind
# them was among the dearer steps of a definition, in time and in objects the garbage collector
# then keeps scanning, and most ops of a library are never differentiated: all of it is made on
# first use, once, under this lock (reentrant: a Function's maker asks for the closures).
_CREATE = threading.RLock()


class _Call:
    """Per-call facts passed to ``forward`` as the last ``apply`` input (a pytree leaf)."""

    __slots__ = ("keyset", "n_args", "kw_names", "kernel")

    def __init__(self, keyset: Any, n_args: int, kw_names: tuple[str, ...], kernel: Callable[..., Any] | None = None) -> None:
        self.keyset = keyset  # from the dispatcher; None on the eager fast path
        self.n_args = n_args
        self.kw_names = kw_names
        self.kernel = kernel  # the backend kernel the fast path already chose


class Functions(Mapping[str, "type[torch.autograd.Function]"]):
    """An op's autograd.Functions, each created on first use: :meth:`generic` for the
    dispatcher's Autograd kernel (its forward redispatches below autograd) and, as a mapping,
    device type -> the eager fast path's Function (its forward calls that device's kernel,
    nothing else), for ops without keyword-only arguments. Keys are known at once: ``in`` and
    iteration create nothing. One small object per op, rather than closures per Function."""

    __slots__ = ("_record", "_kernels", "_formulas", "_generic", "_fast")

    def __init__(self, record: OpRecord) -> None:
        self._record = record
        plan = record.plan
        fast_path = plan is not None and plan.grad == "function" and not any(a.kwarg_only for a in record.schema.arguments)
        self._kernels: Mapping[str, Kernel] = plan.kernels if plan is not None and fast_path else {}
        self._formulas: tuple[Callable[[], type[torch.autograd.Function]], Callable[[Kernel], type[torch.autograd.Function]]] | None = None
        self._generic: type[torch.autograd.Function] | None = None
        self._fast: dict[str, type[torch.autograd.Function]] | None = None

    def _parts(self) -> tuple[Callable[[], type[torch.autograd.Function]], Callable[[Kernel], type[torch.autograd.Function]]]:
        # Under _CREATE: the closures every Function of the op is made of, made once.
        if self._formulas is None:
            self._formulas = _formulas(self._record, self.functorch_entry)
        return self._formulas

    def generic(self) -> type[torch.autograd.Function]:
        """The Function the Autograd kernel applies when grad is needed."""
        fn_cls = self._generic
        if fn_cls is None:
            with _CREATE:
                if self._generic is None:
                    self._generic = self._parts()[0]()
                fn_cls = self._generic
        return fn_cls

    def __getitem__(self, device: str) -> type[torch.autograd.Function]:
        fn_cls = self._fast.get(device) if self._fast is not None else None
        if fn_cls is None:
            kernel = self._kernels[device]  # KeyError for a device without one
            with _CREATE:
                if self._fast is None:
                    self._fast = {}
                fn_cls = self._fast.get(device)
                if fn_cls is None:
                    fn_cls = self._fast[device] = self._parts()[1](kernel)
        return fn_cls

    def __contains__(self, device: object) -> bool:
        return device in self._kernels

    def __iter__(self) -> Iterator[str]:
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)

    def __repr__(self) -> str:
        return f"<autograd.Functions of {self._record.qualname}: {', '.join(self._kernels) or 'no fast path'}>"

    def functorch_entry(self, *args: Any, **kwargs: Any) -> Any:
        """The op's call while torch.func transforms are active (from the class call, never
        from inside the dispatcher, where functorch's handling of Functions cannot run).
        A grad/jvp level on top applies the Function; vmap levels reach the op's batching rule."""
        if _C._are_functorch_transforms_active() and _top_level_differentiates():
            return self.generic().apply(*args, *kwargs.values(), _Call(None, len(args), tuple(kwargs)))
        return self._record.op(*args, **kwargs)  # type: ignore[misc]


def build_autograd_functions(record: OpRecord) -> tuple[Callable[[], type[torch.autograd.Function]], Functions]:
    """The op's autograd.Functions (see :class:`Functions`), each created on first use: the
    function that gives the generic one, and the fast path's by device. Sets
    ``record.functorch_entry``."""
    functions = Functions(record)
    record.functorch_entry = functions.functorch_entry
    return functions.generic, functions


def _formulas(
    record: OpRecord, functorch_entry: Callable[..., Any]
) -> tuple[Callable[[], type[torch.autograd.Function]], Callable[[Kernel], type[torch.autograd.Function]]]:
    """What the op's Functions are made of: ``(make_generic(), make_fast(kernel))``."""
    schema = record.schema
    positional = [a for a in schema.arguments if not a.kwarg_only]
    kw_only = [a for a in schema.arguments if a.kwarg_only]
    # The dispatcher drops trailing arguments equal to their default; setup_context sees them all.
    pos_defaults = [record.signature.parameters[a.name].default for a in positional]
    kw_defaults = {a.name: record.signature.parameters[a.name].default for a in kw_only if a.has_default_value()}
    n_pos = len(positional)
    # backward may stop after the arguments a caller can pass (torch's convention), so at the
    # first of the trailing defaulted ones.
    required = n_pos - len(list(itertools.takewhile(lambda a: a.has_default_value(), reversed(positional))))
    kw_index = {a.name: n_pos + i for i, a in enumerate(kw_only)}
    qualname = record.qualname
    cls_name = record.cls_name
    # The user's setup_context, called directly in its own form (no adapter frame).
    user_setup = record.hooks.get("setup_context")
    setup_kw = user_setup is not None and "keyword_only_inputs" in _memo.signature(user_setup).parameters
    fresh_outputs = len(schema.returns) > 0 and not record.mutated
    is_fresh = output_is_fresh()
    below = call_below_autograd()
    below_guard = None if _native.native_module() is not None else _C._AutoDispatchBelowAutograd
    convert = converter(schema)
    is_exact = exact_predicate(schema)
    # Only a Tensor-returning op's fresh Tensor is final: everything else is finished.
    single_tensor = record.plan is not None and record.plan.single_tensor

    def user_backward(ctx: Any, grads: tuple[Any, ...]) -> tuple[Any, ...]:
        if record.backward is None:
            raise RuntimeError(
                f"Trying to backward through {qualname} but no autograd formula was registered: "
                f"define setup_context and backward on {cls_name}"
            )
        result = record.backward(ctx, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        assert isinstance(result, tuple)
        if required <= len(result) < n_pos and not any(ctx.needs_input_grad[len(result) : n_pos]):
            # torch's convention (custom_op code): gradients for the arguments passed only.
            result += (None,) * (n_pos - len(result))
        if not n_pos <= len(result) <= n_pos + len(kw_only):
            raise RuntimeError(
                f"{cls_name}.backward returned {len(result)} gradients; expected one per positional input "
                f"({n_pos})" + (f", optionally followed by keyword-only ones in order (up to {len(kw_only)})" if kw_only else "")
            )
        return result

    # setup_context style (forward takes no ctx): what torch.func transforms require.
    def forward(*flat: Any) -> Any:
        call: _Call = flat[-1]
        args = flat[: call.n_args]
        kwargs = dict(zip(call.kw_names, flat[call.n_args : -1]))
        if call.kernel is not None:  # the fast path, for ops with keyword-only arguments
            # The checked kernel: outputs already checked and converted.
            out = below(call.kernel, *args, **kwargs)
        elif call.keyset is None:
            # Under torch.func: the level above was just taken care of; the op meets the
            # levels below (or none) afresh.
            out = functorch_entry(*args, **kwargs)
        else:
            with _C._AutoDispatchBelowAutograd():
                out = record.op.redispatch(call.keyset & _AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]
        return out

    def setup_context(ctx: Any, flat: tuple[Any, ...], out: Any) -> None:
        call: _Call = flat[-1]
        setup = record.setup_context
        if setup is not None:
            args = flat[: call.n_args]
            kwargs = dict(zip(call.kw_names, flat[call.n_args : -1]))
            inputs = tuple(args) + tuple(pos_defaults[len(args) :])
            setup(ctx, inputs, {**kw_defaults, **kwargs}, out)
        ctx._opclass_call = call

    def jvp(ctx: Any, *tangents: Any) -> Any:
        call: _Call = ctx._opclass_call
        if record.jvp is None:
            raise RuntimeError(
                f"Trying to use forward-mode AD with {qualname} but no forward-mode formula was registered: "
                f"define jvp on {cls_name}"
            )
        # One tangent per positional input (None past those given), as backward returns grads.
        pos = tuple(tangents[: call.n_args]) + (None,) * (n_pos - call.n_args)
        return record.jvp(ctx, *pos)

    def backward(ctx: Any, *grads: Any) -> Any:
        call: _Call = ctx._opclass_call
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
        for name in call.kw_names:
            i = kw_index[name]
            grads_in.append(result[i] if i < len(result) else None)
        return (*grads_in, None)

    def fast_function(k: Kernel) -> type[torch.autograd.Function]:
        # Aliasing errors name the hook whose kernel ran, as on the dispatcher path.
        kernel, where = k.user, k.where

        def fast_forward(ctx: Any, *args: Any) -> Any:
            # The kernel sees what it sees on the dispatcher path: autograd below it (the guard
            # object inline without the native guard: one Python frame less than below()).
            if below_guard is None:
                out = below(kernel, *args)
            else:
                with below_guard():
                    out = kernel(*args)
            if not is_fresh(out) or not single_tensor:
                if not is_exact(out):
                    out = convert(where, out)
                if fresh_outputs and not is_fresh(out):
                    check_outputs(where, len(schema.returns), args, {}, out)
            if user_setup is not None:
                if setup_kw:
                    user_setup(ctx, args, {}, out)
                else:
                    user_setup(ctx, args, out)
            return out

        def fast_backward(ctx: Any, *grads: Any) -> Any:
            return user_backward(ctx, grads)

        # Same class name as the dispatcher's Function: grad_fn reads the same on both paths.
        return _function_class(f"{cls_name}Function", fast_forward, fast_backward, schema, f"{cls_name}Function[{k.hook}]")

    def vmap(info: Any, in_dims: tuple[Any, ...], *flat: Any) -> Any:
        # A vmap level under a grad/jvp level: batch the op itself (its vmap hook, or torch's
        # per-sample fallback), under a vmap of our own.
        call: _Call = flat[-1]

        def one(*values: Any) -> Any:
            return functorch_entry(*values[: call.n_args], **dict(zip(call.kw_names, values[call.n_args :])))

        out = torch.vmap(one, in_dims=tuple(in_dims[:-1]), randomness=info.randomness)(*flat[:-1])
        return out, (0,) * len(out) if isinstance(out, tuple) else 0

    def make_generic() -> type[torch.autograd.Function]:
        if _has_lists(schema):
            # torch's supports_tensorlist wraps only forward(ctx, ...)-style Functions: Tensor-list
            # ops keep that style, and so get no torch.func transforms and no jvp.
            def forward_with_ctx(ctx: Any, *flat: Any) -> Any:
                out = forward(*flat)
                setup_context(ctx, flat, out)
                return out

            return _function_class(f"{cls_name}Function", forward_with_ctx, backward, schema)
        return _function_class(f"{cls_name}Function", forward, backward, schema, setup_context=setup_context, jvp=jvp, vmap=vmap)

    return make_generic, fast_function


def _function_class(
    name: str,
    forward: Callable[..., Any],
    backward: Callable[..., Any],
    schema: Any,
    qualname: str | None = None,
    **extra: Callable[..., Any],
) -> type[torch.autograd.Function]:
    body: dict[str, Any] = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    body.update({k: staticmethod(v) for k, v in extra.items()})
    for method in body.values():
        shield(method.__func__)
    fn_cls = type(name, (torch.autograd.Function,), body)
    fn_cls.__module__ = __name__
    fn_cls.__qualname__ = qualname or name
    if _has_lists(schema):
        from torch._library.autograd import supports_tensorlist

        fn_cls = supports_tensorlist(fn_cls)
    return fn_cls


def _top_level_differentiates() -> bool:
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
    from torch._C._functorch import TransformType

    return retrieve_current_functorch_interpreter().key() in (TransformType.Grad, TransformType.Jvp)


def call_below_autograd() -> Callable[..., Any]:
    """``below(fn, *args, **kwargs)``: call ``fn`` with autograd dispatch keys excluded, as a
    kernel runs inside the dispatcher's Autograd kernel (native: no context-manager object)."""
    native = _native.native_module()
    if native is not None:
        return native.call_below_autograd  # type: ignore[no-any-return]

    def below(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with _C._AutoDispatchBelowAutograd():
            return fn(*args, **kwargs)

    return below


def _has_lists(schema: Any) -> bool:
    """Tensor-list arguments or returns."""
    return any("List[" in str(a.type) and "Tensor" in str(a.type) for a in (*schema.arguments, *schema.returns))


def _needs_input_grad(flags: tuple[Any, ...], call: _Call, kw_index: dict[str, int], n_pos: int) -> tuple[Any, ...]:
    """``needs_input_grad`` in the user's order: every positional input, then keyword-only ones."""
    if len(flags) == n_pos + len(kw_index) and call.n_args == n_pos:
        return flags
    out = list(flags[: call.n_args]) + [False] * (n_pos - call.n_args) + [False] * len(kw_index)
    for j, name in enumerate(call.kw_names):
        out[kw_index[name]] = flags[call.n_args + j]
    return tuple(out)


def plain_keysets(record: OpRecord) -> dict[int, Callable[..., Any]]:
    """Raw keysets at the Autograd key that mean "plain dense tensors on one device", and the
    backend kernel that the dispatcher would reach from there (nothing else runs in between)."""
    assert record.plan is not None
    return {raw: kernel.checked for device_type, kernel in record.plan.kernels.items() for raw in _PLAIN_RAW[device_type]}


def _plain_raw(device_type: str) -> tuple[int, int]:
    key = getattr(_C.DispatchKey, FAST_DEVICES[device_type])
    keyset = _C.DispatchKeySet(key).add(getattr(_C.DispatchKey, "Autograd" + key.name))
    return keyset.raw_repr(), keyset.add(_C.DispatchKey.ADInplaceOrView).raw_repr()


# Per device type, once: every definition asks.
_PLAIN_RAW = {device_type: _plain_raw(device_type) for device_type in FAST_DEVICES}


def make_autograd_kernel(record: OpRecord) -> Callable[..., Any]:
    """The kernel registered at the Autograd key: apply the Function only when grad is needed.

    Without grad, plain dense tensors go straight to the backend kernel instead of crossing back
    into the dispatcher; anything else (modes, Python keys, other layouts) is redispatched.
    """
    # The Function's apply, looked up on the first call that needs grad (the class is created then).
    apply: Callable[..., Any] | None = None

    def function_apply() -> Callable[..., Any]:
        nonlocal apply
        fn_cls = record.autograd_function
        assert fn_cls is not None
        apply = fn_cls.apply
        return apply

    is_out = record.is_out
    functional = not record.mutated
    opname = record.name
    plain = plain_keysets(record)
    # Tuples: an empty one is shared, and none of them is a container the collector tracks.
    bump_positions = tuple(i for i in record.mutated if not record.schema.arguments[i].kwarg_only)
    bump_names = tuple(record.schema.arguments[i].name for i in record.mutated if record.schema.arguments[i].kwarg_only)
    bump = _C._increment_version
    native = _native.native_module()
    guard = native.guard if native is not None else None
    specs = _guard_specs(record)
    assert record.plan is not None
    # The native guard's codes (1 cpu, 2 cuda) and the plan's kernel for each.
    codes = {code: k for code, k in ((1, record.plan.kernels.get("cpu")), (2, record.plan.kernels.get("cuda"))) if k is not None}
    # Ops returning nothing: the user's kernel (no wrapper frame), its result checked below.
    nothing = not record.schema.returns
    by_code = {code: k.user if nothing else k.checked for code, k in codes.items()}
    wheres = {code: k.where for code, k in codes.items()}
    is_fresh = output_is_fresh()
    n_returns = len(record.schema.returns)
    # Functional ops: the user's kernel and an inline output check (one frame less).
    user_by_code = {code: (k.user, k.where) for code, k in codes.items()} if n_returns and not record.mutated else {}

    convert = converter(record.schema)
    is_exact = exact_predicate(record.schema)
    # Only where the op returns one Tensor does a fresh result need nothing more.
    several = [str(r.real_type) for r in record.schema.returns] != ["Tensor"]
    # _any_requires_grad does not look into lists holding None; the guards do.
    optional_lists = tuple(i for i, a in enumerate(record.schema.arguments) if str(a.real_type) == "List[Optional[Tensor]]" and not a.kwarg_only)

    def check_mutation(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # Autograd cannot record a mutation inside a kernel: the mutated Tensor's history would
        # stay as it was, and gradients through it would be silently wrong.
        for name, t in mutated_tensors(args, kwargs, bump_positions, bump_names, record.schema):
            if t.requires_grad:
                raise RuntimeError(
                    f"{record.qualname} ({record.cls_name}): the op writes to {name!r}, which requires grad, and autograd "
                    f"cannot record a custom op's mutation (gradients through {name!r} would be wrong). Pass a Tensor that "
                    f"does not require grad ({name}.detach(), or call under torch.no_grad()), or make the op functional "
                    f"(return a new Tensor instead of writing to {name!r}) and define setup_context and backward."
                )

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if guard is not None and not kwargs:
            # One native call answers "plain dense tensors, one device, grad needed?".
            code = guard(specs[len(args)], *args)
            user = user_by_code.get(code)
            if user is not None:
                out = user[0](*args)
                if several or not is_fresh(out):
                    if not is_exact(out):
                        out = convert(user[1], out)
                    check_outputs(user[1], n_returns, args, kwargs, out)
                return out
            kernel = by_code.get(code)
            if kernel is not None:
                # The checked kernel converts (or fails) before the bump, as the dispatcher would.
                out = kernel(*args)
                if nothing and out is not None:
                    convert(wheres[code], out)  # raises, naming the op and the hook
                if bump_positions and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
                    bump_mutated(bump, args, kwargs, bump_positions, bump_names)
                return out
            if code & 4 and functional:
                return (apply or function_apply())(*args, _Call(keyset, len(args), ()))
        if _C.is_grad_enabled() and (
            _C._any_requires_grad(*args, **kwargs) or (optional_lists and _optional_list_requires_grad(args, optional_lists))
        ):
            if is_out:
                raise RuntimeError(
                    f"{opname}(): functions with out=... arguments don't support automatic "
                    "differentiation, but one of the arguments requires grad."
                )
            if not functional:
                check_mutation(args, kwargs)
            # Under torch.func transforms the Function's forward dispatches the op afresh.
            call_keyset = None if _C._are_functorch_transforms_active() else keyset
            return (apply or function_apply())(*args, *kwargs.values(), _Call(call_keyset, len(args), tuple(kwargs)))
        if functional and _forward_ad._current_level >= 0:
            # Dual tensors need not require grad: let the Function give tangents (or say it cannot).
            return (apply or function_apply())(*args, *kwargs.values(), _Call(keyset, len(args), tuple(kwargs)))
        kernel = plain.get(keyset.raw_repr())
        if kernel is None:
            with _C._AutoDispatchBelowAutograd():
                return record.op.redispatch(keyset & _AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]
        out = kernel(*args, **kwargs)  # the checked kernel: converted (or failed) before the bump
        if (bump_positions or bump_names) and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
            bump_mutated(bump, args, kwargs, bump_positions, bump_names)
        return out

    return autograd_kernel


def _optional_list_requires_grad(args: tuple[Any, ...], positions: Sequence[int]) -> bool:
    return any(t is not None and t.requires_grad for i in positions if i < len(args) for t in args[i])


def _guard_specs(record: OpRecord) -> dict[int, bytes]:
    """Native-guard specs for the positional arguments the dispatcher passes, by count given."""
    letters = []
    for a in record.schema.arguments:
        if a.kwarg_only:
            break
        t = str(a.real_type)
        letters.append(_native.spec_letter(t))
    return {n: "".join(letters[:n]).encode() for n in range(len(letters) + 1)}


def mutated_tensors(args: tuple[Any, ...], kwargs: dict[str, Any], positions: Sequence[int], names: Sequence[str], schema: Any) -> list[tuple[str, torch.Tensor]]:
    """``(argument name, Tensor)`` for every Tensor the call writes to (list elements included)."""
    values = [(schema.arguments[i].name, args[i]) for i in positions if i < len(args)] + [(n, kwargs[n]) for n in names if n in kwargs]
    return [(n, t) for n, v in values for t in (v if isinstance(v, (list, tuple)) else (v,)) if isinstance(t, torch.Tensor)]


def bump_mutated(bump: Callable[[Any], None], args: tuple[Any, ...], kwargs: dict[str, Any], positions: Sequence[int], names: Sequence[str]) -> None:
    """Bump the version counter of each mutated Tensor (``bump`` skips inference tensors)."""
    values = [args[i] for i in positions if i < len(args)] + [kwargs[n] for n in names if n in kwargs]
    bump([t for v in values for t in (v if isinstance(v, (list, tuple)) else (v,)) if isinstance(t, torch.Tensor)])
