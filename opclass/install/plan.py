"""The call plan: what a plain eager call of one op may do without the dispatcher, decided once
per install from the kernels the install registered, and read by all three fast routes (the
generated call, the C entry, the Autograd kernel's shortcut).

The guards admit a call only when its dispatch key set is within the plain CPU/CUDA key sets, so
a kernel at any other key can never be reached by such a call. A kernel at a reachable key that
the plan does not understand turns the fast path off: correct first, fast second.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping

import torch

from opclass.core import memo
from opclass.core.types import FAST_DEVICES, guard_text
from opclass.define.arguments import Argument, Arguments

if TYPE_CHECKING:
    from opclass.install.record import OpRecord
    from opclass.install.table import Kernel

__all__ = ["CallPlan", "Registration", "build_plan", "has_guard"]

_AUTOCAST = {"Autocast" + key: device for device, key in FAST_DEVICES.items()}
_DEFAULT = "CompositeExplicitAutograd"
# Keys (runtime or alias) a call with plain cpu/cuda key sets can reach. Kernels there are
# understood only when opclass itself made them (Autograd, ADInplaceOrView, BackendSelect) or
# when they are a device hook's kernel (backend keys); anything else turns the fast path off.
_REACHABLE = frozenset(
    {*FAST_DEVICES.values(), *_AUTOCAST, _DEFAULT, "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd",
     "Autograd", "AutogradCPU", "AutogradCUDA", "AutogradOther", "ADInplaceOrView", "BackendSelect"}
)
# The keys as enum values: asking the dispatcher with a key's name costs a parse of the name (several
# times the lookup itself), and every definition asks about each of these keys.
_REACHABLE_KEYS = {name: getattr(torch._C.DispatchKey, name) for name in sorted(_REACHABLE)}


@dataclasses.dataclass(frozen=True)
class Registration:
    """One kernel registration of an install: the op name, dispatch key, function and hook
    (``None``: opclass's own)."""

    op_name: str
    key: str
    fn: Callable[..., Any]
    hook: str | None


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What a plain eager call of the op does; read by every fast route, never recomputed."""

    #: Device type -> the kernel a plain call on that device runs (the dispatcher's choice).
    kernels: Mapping[str, Kernel]
    #: Device types with an ``Autocast<device>`` kernel: the fast path needs autocast off.
    autocast_devices: tuple[str, ...]
    #: Calls that need grad: ``"function"`` (a prebuilt autograd.Function), ``"eager"`` (the kernel
    #: under autograd) or ``"dispatcher"``.
    grad: str
    #: Why the class call always goes to the dispatcher (``None``: it has a fast path).
    off: str | None
    #: Devices left to the dispatcher, and why.
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.off is not None:
            return f"fast path off: {self.off}"
        text = "fast path: " + ", ".join(self.kernels)
        if self.autocast_devices:
            text += f" (autocast off for {', '.join(self.autocast_devices)})"
        return text + "".join(f"; {note}" for note in self.notes)


def build_plan(record: OpRecord, registrations: list[Registration], replaced: Collection[str] = ()) -> CallPlan:
    """The plan for ``record``, from the hooks' registrations (opclass's core ones are understood);
    ``replaced``: the keys where the install that this one replaces in place has kernels (still
    in the dispatcher while this one plans; not another Library's)."""
    spec, name = record.spec, record.spec.overload_name()
    last = {r.key: r for r in registrations if r.op_name == name}
    for key, enum in _REACHABLE_KEYS.items():
        # A kernel some other Library put there (torch.library.register_autocast without lib=...).
        if key not in last and key not in replaced and torch._C._dispatch_has_kernel_for_dispatch_key(spec.qualname, enum):
            last[key] = Registration(name, key, _outside, "")
    autocast = tuple(_AUTOCAST[k] for k in last if k in _AUTOCAST)
    foreign = [r for k, r in last.items() if k in _REACHABLE and k not in _AUTOCAST and k not in (*FAST_DEVICES.values(), _DEFAULT) and r.hook is not None]
    kernels: dict[str, Kernel] = {}
    notes: list[str] = []
    for device, key in FAST_DEVICES.items():
        reached = last.get(key) or last.get(_DEFAULT)
        kernel = record.kernel_for(device)
        if reached is None or getattr(reached.fn, "opclass_stand_in", False):  # it only raises that nothing serves the call
            continue
        if kernel is not None and reached.fn is kernel.checked:
            kernels[device] = kernel
        else:
            notes.append(f"{device} runs the kernel {_who(reached)} registered at {reached.key}")
    off = _why_off(record, foreign, kernels, notes)
    # An extended op without a formula gets no Autograd kernel of ours: grad is the dispatcher's.
    own_autograd = not spec.existing or record.differentiable
    grad = "eager" if record.differentiates_kernel is not None else "dispatcher" if spec.mutated or spec.is_out or not own_autograd else "function"
    return CallPlan(kernels if not foreign else {}, autocast, grad, off, tuple(notes))


def _outside(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a placeholder for a kernel registered outside the op's Library")


def _who(r: Registration) -> str:
    return "another Library" if r.fn is _outside else f"hook {r.hook!r}" if r.hook else "opclass"


def _why_off(record: OpRecord, foreign: list[Registration], kernels: Mapping[str, Kernel], notes: list[str]) -> str | None:
    if foreign:
        return "; ".join(f"{_who(r)} registered a kernel at {r.key}" for r in foreign)
    if not kernels:
        # A kernel someone else registered (an extended op's C++ one) is no kernel of the op's own.
        return "; ".join(notes) if notes else "no cpu or cuda kernel"
    if record.spec.existing and record.spec.mutated:
        # Its version counters are whatever the dispatcher does for it (opclass adds no
        # ADInplaceOrView kernel to a foreign op), which a fast path could not match.
        return "the op was defined elsewhere and mutates its arguments"
    for a in record.arguments:
        if not has_guard(a):
            return f"argument {a.name!r} of type {a.jit} has no cheap guard"
    if not any(a.holds_tensor or a.is_device for a in record.arguments):
        return "no Tensor or Device argument picks the device"
    mismatch = next(filter(None, (_default_mismatch(kernel, record.arguments) for kernel in kernels.values())), None)
    return mismatch or ("an argument name starts with '_', like the generated call's own names" if record.arguments.underscored else None)


def _default_mismatch(kernel: Kernel, table: Arguments) -> str | None:
    """Why the kernel would see other arguments from the fast path than from the dispatcher, which
    leaves out arguments equal to their default (the kernel then uses its own default)."""
    try:
        own = memo.signature(kernel.user).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in own.values()):
        return None  # it takes what it is given, and fills in what is left out itself
    for a in table:
        if not a.has_default:
            continue
        mine = own.get(a.name)
        schema_default = list(a.default) if type(a.default) is tuple else a.default  # as kernels get lists
        if mine is None or mine.default is mine.empty or type(mine.default) is not type(schema_default) or mine.default != schema_default:
            given = "no default" if mine is None or mine.default is mine.empty else f"default {mine.default!r}"
            return f"{kernel.where} has {given} for {a.name!r} where the schema's is {a.default!r}"
    return None


def has_guard(a: Argument) -> bool:
    """Whether a call's value for the argument can be checked cheaply."""
    return bool(a.kind.tensor) or guard_text(a.jit, a.name) is not None or a.config is not None
