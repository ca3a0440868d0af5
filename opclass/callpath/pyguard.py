"""The pure-Python guard's per-op records of plain argument sets, checked in one C call.

Reading each Tensor's dispatch key set from Python costs more than the dispatcher from a handful
of Tensors on. So the first call with a given set of argument kinds runs the exact check
(:func:`exact_code`) and, if the call is plain, records torch's own C Tensor check for calls like
it (``torch._C._dynamo.guards.TensorGuards``, no ``torch._dynamo`` import): each Tensor's exact
type, dispatch key set (thread-local keys applied), dtype, device and ``requires_grad``, sizes and
strides left free. A hit proves the dispatcher would make the recorded decision. What a key set
cannot show (TorchFunctionMode, the profiler, forward AD, dispatch modes' Python keys, the Python
dispatcher, jit tracing) the generated call checks on every call.

Each op keeps its two latest records. Calls that keep missing stop recording after
:data:`MAX_RECORDS`, and from :data:`HAND_OVER` Tensors such a miss goes to the dispatcher. If
``TensorGuards`` is missing or fails the self-test (:func:`factory`; a future torch), every call
runs the exact check: slower, same decisions.

Example:
    >>> from opclass.callpath import pyguard
    >>> pyguard.MISSING
    <not passed>
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch
from torch import _C

from opclass.core.types import BUMP, DEVICE_CODES, FAST_DEVICES, GRAD, plain_keysets

__all__ = ["MISSING", "NO_TENSOR", "Slots", "exact_code", "miss", "factory", "HAND_OVER", "MAX_RECORDS"]

#: Records an op may add before misses stop recording (argument kinds that change every call).
MAX_RECORDS = 32
#: Tensor count from which a call that misses goes to the dispatcher without the exact check,
#: which costs more per Tensor from Python than the dispatcher's (docs/performance.md).
HAND_OVER = 24

_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Missing:
    """Default of every parameter of a generated ``__new__``: "not passed" (see :mod:`opclass.callpath.source`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not passed>"


#: The value of a parameter the caller did not pass.
MISSING: Any = _Missing()


class _NoTensor(torch.Tensor):
    """Stands in for ``None`` in an optional Tensor's place, so a record can require ``None``
    there: no other object has this exact type."""


#: The stand-in for ``None`` that generated calls pass to the check in an optional Tensor's place.
NO_TENSOR: Any = torch.Tensor._make_subclass(_NoTensor, torch.empty(0))


#: An empty slot: (check, code); its check matches nothing.
EMPTY: tuple[Callable[..., bool], int] = (lambda *values: False, 0)


class Slots(list):  # type: ignore[type-arg]
    """One op's records, most recent first: ``[(check, code), (check, code), built]``. A list so a
    generated call reads a slot with one subscript and a miss replaces both slots with one slice
    assignment (atomic under the GIL: a thread sees old or new pairs, never a mix)."""

    def __init__(self) -> None:
        super().__init__([EMPTY, EMPTY, 0])


_factory: Callable[[Sequence[Any]], Callable[..., bool]] | None = None
_status = "not tried yet"
_started = threading.Lock()  # taken by the call that starts the self-test, never given back
_done = threading.Event()


def _make_factory() -> Callable[[Sequence[Any]], Callable[..., bool]] | None:
    """``factory(tensors) -> check`` from torch's TensorGuards, or ``None`` if it is missing or
    does not behave as the records need (``_status`` says which, for debugging)."""
    global _status
    try:
        from torch._C._dynamo.guards import TensorGuards
    except ImportError as e:
        _status = f"unavailable ({e}): every call runs the exact check"
        return None

    make: Any = TensorGuards  # its keywords differ between torch's stubs and its C code

    def factory(tensors: Sequence[Any]) -> Callable[..., bool]:
        free = [[None] * t.dim() for t in tensors]
        guards = make(*tensors, dynamic_dims_sizes=free, dynamic_dims_strides=free, tensor_check_names=[f"t{i}" for i in range(len(tensors))])
        return guards.check  # type: ignore[no-any-return]

    try:
        problem = _self_test(factory)
    except Exception as e:  # an API change: fall back to the exact check, say so
        problem = f"{type(e).__name__}: {e}"
    if problem is not None:
        _status = f"TensorGuards does not behave as expected ({problem}): every call runs the exact check"
        return None
    _status = "cached checks (torch._C._dynamo.guards.TensorGuards)"
    return factory


def _self_test(factory: Callable[[Sequence[Any]], Callable[..., bool]]) -> str | None:
    """What the records rely on, tried once: ``None``, or the first expectation that failed."""
    a, b = torch.randn(3), torch.randn(3)
    check = factory([a, b])
    with torch.inference_mode():
        inference = torch.randn(3)
    c = torch.randn(3, dtype=torch.complex64)
    check_c = factory([a, c])
    accepted = {"other sizes": (torch.randn(5), torch.randn(1)), "other strides": (torch.randn(6)[::2], b)}
    refused: dict[str, tuple[Any, ...]] = {
        "a Parameter for a Tensor": (a, torch.nn.Parameter(torch.randn(3))),
        "a subclass": (a, torch.randn(3).as_subclass(_NoTensor)),
        "requires_grad": (a, torch.randn(3, requires_grad=True)),
        "a meta Tensor": (a, torch.empty(3, device="meta")),
        "a sparse Tensor": (a, torch.randn(3).to_sparse()),
        "a negative-bit view": (a, torch._neg_view(b)),
        "an inference Tensor": (a, inference),
        "another dtype": (a, torch.randn(3, dtype=torch.float64)),
        "another dim": (a, torch.randn(3, 1)),
        "None": (a, None),
        "a number": (a, 1.0),
    }
    cases = {**{what: (check, v, True) for what, v in accepted.items()}, **{what: (check, v, False) for what, v in refused.items()}}
    cases.update({"a conjugate-bit view": (check_c, (a, c.conj()), False), "its own arguments": (check_c, (a, c), True)})
    for what, (fn, values, ok) in cases.items():
        if fn(*values) != ok:
            return f"{'refuses' if ok else 'accepts'} {what}"
    states: dict[str, Callable[[], Any]] = {
        "inference_mode": torch.inference_mode,
        "excluded autograd keys": _C._AutoDispatchBelowAutograd,
        "autocast": lambda: torch.autocast("cpu"),
    }
    for what, state in states.items():
        with state():
            if check(a, b):
                return f"ignores {what}"
    # Included keys must show too; the generated call checks the ones that do not (dispatch
    # modes' Python keys, the Python dispatcher, jit tracing) itself.
    # (Not Meta: setting it, even briefly, leaves torch state behind that breaks later factory calls.)
    for name in ("Functionalize", "PreDispatch", "FuncTorchDynamicLayerFrontMode", "Conjugate"):
        key = getattr(_C.DispatchKey, name, None)
        if key is None or _C._dispatch_tls_is_dispatch_key_included(key):
            continue
        # Set and cleared by hand: torch 2.11's _IncludeDispatchKeyGuard does not restore on __exit__.
        _C._dispatch_tls_set_dispatch_key_included(key, True)
        try:
            ignored = check(a, b)
        finally:
            _C._dispatch_tls_set_dispatch_key_included(key, False)
        if ignored:
            return f"ignores {name} included in dispatch"
    return None


def factory(wait: bool = False) -> Callable[[Sequence[Any]], Callable[..., bool]] | None:
    """The record maker once its self-test has passed; ``None`` while it runs, or if it failed. The
    first call starts the self-test on a thread of its own, in a thread's default state whatever
    state that call is in (torch makes its first sparse, autocast and inference Tensors there), and
    does not wait: misses meanwhile record nothing. ``wait=True`` waits (tests, tools)."""
    global _status
    if not _done.is_set():
        if _started.acquire(blocking=False):
            _status = "self-test running: calls run the exact check until it is over"
            # Not a daemon: the interpreter waits for it at exit (torch aborts if a thread is still
            # in it during finalization).
            threading.Thread(target=_run_self_test, name="opclass-guard-self-test").start()
        if wait:
            _done.wait()
    return _factory


def _run_self_test() -> None:
    global _factory
    try:
        _factory = _make_factory()
    finally:
        _done.set()


def _bad_excluded() -> int:
    """Raw bits whose exclusion from dispatch leaves plain eager mode (all but autocast, autograd,
    ADInplaceOrView; backend bits, the low ones below Dense, do not count)."""
    keys = _C.DispatchKey
    # Autocast keys are excluded by default (autocast off); not all of them are named in Python.
    allowed = _C._dispatch_tls_local_exclude_set().add(keys.ADInplaceOrView)
    for name in dir(keys):
        if name.startswith(("Autocast", "Autograd")):
            allowed = allowed.add(getattr(keys, name))
    backend_bits = _C.DispatchKeySet(keys.Dense).raw_repr() - 1
    return ~(int(allowed.raw_repr()) | backend_bits) & ((1 << 64) - 1)


# Constants of plain eager mode, computed once (they are the same for every op).
OK_KEYS = {device: frozenset(ks.raw_repr() for ks in plain_keysets(device)) for device in FAST_DEVICES}
# Thread-local included key sets (normal and inference_mode).
_BASE = _C.DispatchKeySet(_C.DispatchKey.BackendSelect)
INCLUDED_OK = frozenset({_BASE.raw_repr(), _BASE.add(_C.DispatchKey.ADInplaceOrView).raw_repr()})
BAD_EXCLUDED = _bad_excluded()
_keys = _C._dispatch_keys
_excluded_set = _C._dispatch_tls_local_exclude_set
_included_set = _C._dispatch_tls_local_include_set
_excluded = _C._dispatch_tls_is_dispatch_key_excluded
_AG = _C.DispatchKey.AutogradFunctionality
_ADIV = _C.DispatchKey.ADInplaceOrView


def exact_code(tensors: Sequence[Any], devices: frozenset[str]) -> int:
    """The exact decision for a call's Tensors (``NO_TENSOR`` for ``None``) and the thread-local
    dispatch keys (the caller checked the rest of the state): 0 (not plain: the dispatcher), else the
    device's code, ``| GRAD`` if grad may be needed, ``| BUMP`` if mutated Tensors' versions are bumped."""
    ok: frozenset[int] | None = None
    device, grad = "", False
    for t in tensors:
        if t is NO_TENSOR:
            continue
        if type(t) not in _PLAIN:
            return 0
        ks = _keys(t).raw_repr()
        if ok is None:
            device = next((d for d, sets in OK_KEYS.items() if ks in sets), "")
            if device not in devices:
                return 0
            ok = OK_KEYS[device]
        elif ks not in ok:
            return 0
        grad = grad or t.requires_grad
    if ok is None or _included_set().raw_repr() not in INCLUDED_OK or _excluded_set().raw_repr() & BAD_EXCLUDED:
        return 0
    return DEVICE_CODES[device] | (GRAD if grad and not _excluded(_AG) else 0) | (0 if _excluded(_ADIV) else BUMP)


def miss(slots: Slots, tensors: tuple[Any, ...], devices: frozenset[str]) -> int:
    """A call no record matched: the exact decision, recorded for calls like it when plain."""
    if len(tensors) >= HAND_OVER and (slots[2] >= MAX_RECORDS or factory() is None):
        return 0
    code = exact_code(tensors, devices)
    if code and slots[2] < MAX_RECORDS:
        make = factory()
        if make is not None:
            slots[:] = [(make(tensors), code), slots[0], slots[2] + 1]
    return code
