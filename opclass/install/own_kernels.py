"""The kernels opclass registers for every op, whatever hooks it defines: Autograd,
ADInplaceOrView (mutable ops) and BackendSelect (no Tensor inputs). An op defined elsewhere gets
only the Autograd kernel, with a formula (as ``torch.library.register_autograd``), and
BackendSelect where its class's kernels need it.

Example:
    >>> import torch
    >>> from opclass.install.own_kernels import bump_mutated
    >>> x = torch.zeros(2)
    >>> bump_mutated((x,), {}, (0,), ())
    >>> x._version
    1
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C
from torch.fx.node import _side_effectful_functions
from torch.utils._python_dispatch import _disable_current_modes

from opclass.core import native
from opclass.core.types import DEVICE_CODES, GRAD, autograd_keysets, same_values, tensors_in
from opclass.install.functions import AFTER_AUTOGRAD, Call, functions, functorch_entry
from opclass.install.outputs import output_is_fresh

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

__all__ = ["register_own_kernels", "plain_keysets", "bump_mutated", "check_mutation"]

_ADIV = _C.DispatchKey.ADInplaceOrView
_AFTER_AD_INPLACE = _C._after_ADInplaceOrView_keyset


def register_own_kernels(record: OpRecord) -> None:
    """Register opclass's own kernels (after the hooks' installers and the call plan)."""
    lib, name = record.lib, record.overload_name()
    if record.decomposes:
        return  # the body's own ops do all of it
    if record.functorch_entry is None:
        record.functorch_entry = functorch_entry(record)
    if not record.existing or record.differentiable:
        lib.impl(name, (record.autograd_kernel or generic_autograd_kernel)(record), "Autograd", with_keyset=True)
    if record.mutated and not record.existing:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Warning only once for all operators")
            lib.impl(name, _version_bump_kernel(record), "ADInplaceOrView", with_keyset=True)
    if not record.schema.returns and not record.mutated and not record.existing:
        # Only its side effect makes such an op useful: keep compilers from dropping it.
        _side_effectful_functions.add(record.op)  # type: ignore[arg-type]
    device = next((a for a in record.arguments if a.is_device), None)
    needs_select = not record.existing or (any(k is not None for k in record.kernels) and not _C._dispatch_has_kernel_for_dispatch_key(record.qualname, "BackendSelect"))
    if device is not None and needs_select and not any(a.holds_tensor for a in record.arguments):
        lib.impl(name, _backend_select_kernel(record, device.index), "BackendSelect", with_keyset=True)


def plain_keysets(record: OpRecord) -> dict[int, Callable[..., Any]]:
    """Raw keysets at the Autograd key that mean "plain dense tensors on one device", and the
    backend kernel that the dispatcher would reach from there (nothing else runs in between)."""
    assert record.plan is not None
    return {raw: kernel.checked for device_type, kernel in record.plan.kernels.items() for raw in autograd_keysets(device_type)}


def _bumps(record: OpRecord) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The written arguments as the dispatcher passes them: positions, and keyword-only names."""
    return tuple(a.index for a in record.arguments.written if not a.keyword_only), tuple(a.name for a in record.arguments.written if a.keyword_only)


def generic_autograd_kernel(record: OpRecord) -> Callable[..., Any]:
    """The Autograd key's kernel (where no hook gives its own): the Function only when grad is
    needed; else plain dense tensors go straight to the backend kernel, and anything else (modes,
    Python keys, other layouts) is redispatched."""
    assert record.plan is not None
    is_out, functional, opname, op = record.is_out, not record.mutated, record.name, record.op
    plain = plain_keysets(record)
    # Tuples: an empty one is shared, and none of them is a container the collector tracks.
    bump_positions, bump_names = _bumps(record)
    module = native.native_module()
    guard = module.guard if module is not None else None
    # Native-guard specs for the positional arguments the dispatcher passes, by count given.
    letters = "".join(a.kind.letter for a in record.arguments.positional)
    specs = {n: letters[:n].encode() for n in range(len(letters) + 1)}
    # The native guard's code per device, and that device's kernel (where providers choose, the
    # checked kernel: it makes the choice of the calling context).
    codes = {DEVICE_CODES[d]: dataclasses.replace(k, user=k.checked) if k.choice is not None else k for d, k in record.plan.kernels.items()}
    fresh, single, finish = output_is_fresh(), record.outputs.single, record.outputs.finish
    # _any_requires_grad does not look into lists holding None; the guards do.
    optional_lists = tuple(a.index for a in record.arguments.positional if a.jit == "List[Optional[Tensor]]")

    # The Function's apply, looked up once, on the first call that needs it (it is made then).
    apply: Callable[..., Any] | None = None

    def function_apply() -> Callable[..., Any]:
        nonlocal apply
        apply = functions(record).generic.apply
        return apply

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if guard is not None and not kwargs:
            # One native call answers "plain dense tensors, one device, grad needed?".
            code = guard(specs[len(args)], *args)
            k = codes.get(code)
            if k is not None:
                if bump_positions and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
                    bump_mutated(args, kwargs, bump_positions, bump_names)
                out = k.user(*args)
                if not (single and fresh(out)):
                    out = finish(k.where, args, kwargs, out)
                return out
            if code & GRAD and functional:
                return (apply or function_apply())(*args, Call(keyset, len(args), ()))
        if _C.is_grad_enabled() and (
            _C._any_requires_grad(*args, **kwargs)
            or (optional_lists and any(t is not None and t.requires_grad for i in optional_lists if i < len(args) for t in args[i]))
        ):
            if is_out:
                raise RuntimeError(f"{opname}(): functions with out=... arguments don't support automatic differentiation, but one of the arguments requires grad.")
            written = None if functional else check_mutation(record, args, kwargs)
            # Under torch.func transforms the Function's forward dispatches the op afresh.
            call_keyset = None if _C._are_functorch_transforms_active() else keyset
            out = (apply or function_apply())(*args, *kwargs.values(), Call(call_keyset, len(args), tuple(kwargs)))
            if written is not None:
                written()
            return out
        if functional and _forward_ad._current_level >= 0:
            # Dual tensors need not require grad: let the Function give tangents (or say it cannot).
            return (apply or function_apply())(*args, *kwargs.values(), Call(keyset, len(args), tuple(kwargs)))
        kernel = plain.get(keyset.raw_repr())
        if kernel is None:
            with _C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]
        if (bump_positions or bump_names) and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
            bump_mutated(args, kwargs, bump_positions, bump_names)
        return kernel(*args, **kwargs)  # the checked kernel

    return autograd_kernel


def check_mutation(record: OpRecord, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], None] | None:
    """Autograd cannot record a write inside a kernel: a written Tensor with history (not a leaf,
    whose bumped version makes a backward that saved it raise) would silently get the gradients
    of its value before the write. Returns None, or a check to run after the kernel that raises
    if such a Tensor's values changed (putting back every written Tensor's values); where values
    cannot be compared (subclasses, meta Tensors, torch.func transforms) the call is refused."""
    values = record.arguments.values(args, kwargs)
    at_risk = [(a, t) for a in record.arguments.written for t in tensors_in((values[a.index],)) if t.requires_grad and not t.is_leaf and not _traced_input(t)]
    if not at_risk:
        return None
    transformed = _C._are_functorch_transforms_active()
    unseen = next((a for a, t in at_risk if transformed or type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_meta), None)
    if unseen is not None:
        raise RuntimeError(
            _write_with_history(record, unseen.name, "whose values cannot be compared here (a FakeTensor, a meta Tensor, or under a torch.func transform), so its gradients may be those of its value before the write")
        )
    with _disable_current_modes():  # a user's dispatch mode sees the op (as with custom_op), not its check
        before = [(t, t.detach().clone()) for t in record.arguments.tensors(args, kwargs, record.arguments.written)]

    def check() -> None:
        with _disable_current_modes(), torch.no_grad():
            changed = next((a for a, t in at_risk for u, b in before if u is t and not same_values(b, t.detach())), None)
            if changed is None:
                return
            for t, b in before:
                t.copy_(b)
        raise RuntimeError(_write_with_history(record, changed.name, "and the kernel changed its values, which are put back: its gradients would silently be those of its value before the write"))

    return check


def _write_with_history(record: OpRecord, name: str, why: str) -> str:
    formula = f" ({record.formula.missing})" if record.formula is not None and record.formula.missing else ""
    # An .out or in-place overload of a class statement's op: its functional op is the differentiable one.
    instead = (
        f"call the functional op {record.convention.base} instead (it is differentiable)" if record.convention.kind != "functional"
        else f"make the op functional (return a new Tensor instead of writing to {name!r}) with an autograd formula{formula}"
    )
    return (
        f"{record.qualname} ({record.cls_name}): the op writes to {name!r}, which requires grad and has autograd history, "
        f"{why}: autograd cannot record a custom op's write. Pass a Tensor that does not require grad ({name}.detach(), "
        f"or call under torch.no_grad()), or {instead}."
    )


def _traced_input(t: torch.Tensor) -> bool:
    """A graph input as AOTAutograd's functionalization wraps it: its history is a stand-in (torch's
    ``Error`` node) either way, and Dynamo's run on fake Tensors was checked. (The joint trace
    clones written inputs with real-looking histories, so every FunctionalTensor counts as one:
    AOTAutograd used without Dynamo is not checked.)"""
    functional = sys.modules.get("torch._subclasses.functional_tensor")
    return functional is not None and isinstance(t, functional.FunctionalTensor)


def bump_mutated(args: tuple[Any, ...], kwargs: dict[str, Any], positions: Sequence[int], names: Sequence[str]) -> None:
    """Bump the version counter of each mutated Tensor (inference tensors are skipped)."""
    _C._increment_version(list(tensors_in([args[i] for i in positions if i < len(args)] + [kwargs[n] for n in names if n in kwargs])))


def _version_bump_kernel(record: OpRecord) -> Callable[..., Any]:
    positions, names = _bumps(record)
    op = record.op
    assert op is not None

    def ad_inplace_or_view(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        # Before the kernel, as custom_op does: a kernel that writes and then raises has still
        # written, and autograd must see that a Tensor it saved changed.
        bump_mutated(args, kwargs, positions, names)
        return op.redispatch(keyset & _AFTER_AD_INPLACE, *args, **kwargs)

    return ad_inplace_or_view


def _backend_select_kernel(record: OpRecord, index: int) -> Callable[..., Any]:
    """Ops without Tensor inputs pick their kernel from the ``device`` argument."""
    arguments, op = record.arguments, record.op
    default = arguments[index].default if arguments[index].has_default else None
    assert op is not None

    def backend_select(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        device = arguments.values(args, kwargs, default)[index]
        key = getattr(_C.DispatchKey, _C._dispatch_key_for_device(torch.device(device).type))
        return op.redispatch(_C.DispatchKeySet(key), *args, **kwargs)

    return backend_select
