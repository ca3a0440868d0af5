"""The choice among an op's providers, per call (the providers hook, :mod:`opclass.builtin_hooks.providers`,
builds a :class:`Table` per install).

For a device type, the candidates are, in the op's order, the providers that run there (by
default their declaration order, then the op's own kernel for the device, then its ``default``),
those available and, under a mode, flagged for it; the first whose predicate accepts the
arguments runs. The order is the one set for a block (``opclass.use_providers``), else by the
environment (``OPCLASS_PROVIDERS="ns::op=triton,default"``, read at import), else in code
(``opclass.set_provider_order``), else the declaration's. A provider that raises raises: the
next one is no fallback for a broken kernel.

The dispatcher's kernel for the device chooses on every call. The class call's fast path calls
the chosen kernel directly when the choice needs no predicate and no block override is active
anywhere (``GATE``), so an op whose first candidate has no predicate costs what a one-kernel op
costs; with a predicate first, one generated call evaluates the predicates.

Example:
    >>> import opclass
    >>> from opclass.builtin_hooks import choice
    >>> choice.current_state().orders.get("docs_choice::none") is None
    True
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import _C

from opclass.errors import did_you_mean, first_line
from opclass.install.outputs import output_is_fresh
from opclass.install.record import Kernel, OpRecord

__all__ = ["Options", "State", "Entry", "Table", "GATE", "FLAGS", "ENV", "MODE_ENV", "current_state", "table_of", "entries_of", "describe_call"]

ENV, MODE_ENV = "OPCLASS_PROVIDERS", "OPCLASS_PROVIDER_MODE"
FLAGS = ("batch_invariant", "deterministic")

#: While ``GATE[0]`` is non-zero (a block override is active in some thread), plain calls of ops
#: with providers take the dispatcher, whose kernel reads the calling thread's overrides.
GATE: list[int] = [0]
GATE_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Options:
    """What a provider declares beside its function (see :func:`provider`)."""

    devices: tuple[str, ...] | None
    supports: Callable[..., bool] | None = None
    available: Callable[[], bool] | None = None
    batch_invariant: bool = False
    deterministic: bool = False
    atol: float | None = None
    rtol: float | None = None

    def flags(self) -> frozenset[str]:
        return frozenset(f for f in FLAGS if getattr(self, f))

    def tolerances(self) -> tuple[float | None, float | None]:
        """``(atol, rtol)`` for ``torch.testing.assert_close``: both ``None`` (its defaults), or both set."""
        if self.atol is None and self.rtol is None:
            return None, None
        return self.atol or 0.0, self.rtol or 0.0


@dataclasses.dataclass(frozen=True)
class State:
    """Orders by op name (``None`` for an op: its declaration's) and the flags the mode requires."""

    orders: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    mode: frozenset[str] = frozenset()


def _parse_env() -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    orders: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (part.strip() for part in os.environ.get(ENV, "").split(";"))):
        op, sep, names = item.partition("=")
        if not sep or "::" not in op or not names.strip():
            raise ValueError(f"{ENV}={os.environ[ENV]!r}: write op=provider,provider;... e.g. 'mylib::rms_norm=triton,default'")
        orders[op.strip()] = tuple(n.strip() for n in names.split(",") if n.strip())
    mode = frozenset(m.strip() for m in os.environ.get(MODE_ENV, "").split(",") if m.strip())
    unknown = mode - set(FLAGS)
    if unknown:
        raise ValueError(f"{MODE_ENV}={os.environ[MODE_ENV]!r}: {', '.join(sorted(unknown))} is no flag; the flags are {', '.join(FLAGS)}")
    return orders, mode


#: The deployment's orders and mode (read at import), and those set in code.
ENV_ORDERS, ENV_MODE = _parse_env()
CODE_ORDERS: dict[str, tuple[str, ...]] = {}
CODE_MODE: list[frozenset[str]] = [frozenset()]
_LOCAL = threading.local()


def global_state() -> State:
    """The process-wide state: the environment's orders over the code's; both modes."""
    return State({**CODE_ORDERS, **ENV_ORDERS}, ENV_MODE | CODE_MODE[0])


def local_overrides() -> list[State]:
    """This thread's block overrides, innermost last."""
    stack: list[State] | None = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


def current_state() -> State:
    """The state a call in this thread sees: its blocks over the global state."""
    state = global_state()
    for block in local_overrides():
        state = State({**state.orders, **block.orders}, state.mode | block.mode)
    return state


# --------------------------------------------------------------------------- one op's providers


@dataclasses.dataclass(eq=False)
class Entry:
    """One candidate kernel of an op: a provider, or one of the op's own kernels."""

    name: str
    fn: Callable[..., Any]
    checked: Callable[..., Any]
    where: str
    options: Options
    own: bool
    #: The user's function itself (what torch.compile traces into, for a ``traceable`` op).
    raw: Callable[..., Any]
    _available: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        """``(available, why not)``, asked once."""
        if self._available is None:
            check = self.options.available
            try:
                self._available = (True, "") if check is None or check() else (False, "available() returned False")
            except Exception as e:  # noqa: BLE001 - an availability check that raises says "no"
                self._available = (False, f"available() raised {first_line(e)}")
        return self._available

    def runs_on(self, device: str | None) -> bool:
        devices = self.options.devices
        return devices is None or (device is not None and device in devices)


class Table:
    """The providers of one install, and the choice per device type (``None``: every device
    type without a kernel of its own, the ``CompositeExplicitAutograd`` slot)."""

    def __init__(self, record: OpRecord, entries: list[Entry], slots: list[str | None], hook: str) -> None:
        self.record, self.entries, self.slots, self.hook = record, entries, slots, hook
        self.names = [e.name for e in entries]
        self.static: dict[str | None, list[Entry]] = {}
        # (id of a block's State, slot) -> (that State, its candidates): the State is held, so that
        # its id is not reused by a later block's while the entry is here.
        self._local: dict[tuple[int, str | None], tuple[State, list[Entry]]] = {}

    def check_order(self, state: State, source: str) -> None:
        order = state.orders.get(self.record.qualname)
        for name in order or ():
            if name not in self.names:
                guess = did_you_mean(name, self.names)
                raise ValueError(
                    f"{source} names provider {name!r} for {self.record.qualname}, which has {', '.join(self.names)}"
                    + (f": did you mean {guess!r}?" if guess else "")
                )

    def ordered(self, state: State) -> list[Entry]:
        order = state.orders.get(self.record.qualname)
        if order is None:
            return self.entries
        by_name = {e.name: e for e in self.entries}
        return [by_name[n] for n in order if n in by_name]

    def candidates(self, slot: str | None, state: State) -> list[Entry]:
        """The entries that may run on ``slot``, in order (availability and mode applied)."""
        return [e for e in self.ordered(state) if e.runs_on(slot) and e.available()[0] and state.mode <= e.options.flags()]

    def refresh(self) -> None:
        """The choice under the global state, per slot (after a change of it)."""
        state = global_state()
        self.static = {slot: self.candidates(slot, state) for slot in self.slots}
        self._local.clear()

    def now(self, slot: str | None) -> list[Entry]:
        """The candidates for a call in this thread."""
        stack = local_overrides() if GATE[0] else None
        if not stack:
            return self.static[slot]
        block = stack[-1]
        key = (id(block), slot)
        found = self._local.get(key)
        if found is None or found[0] is not block:
            if len(self._local) > 64:
                self._local.clear()
            found = self._local[key] = (block, self.candidates(slot, current_state()))
        return found[1]

    def declined(self, slot: str | None, state: State, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[Entry, str | None]]:
        """Each entry with why it does not run for this call (``None``: it runs), in order."""
        order = self.ordered(state)
        found: list[tuple[Entry, str | None]] = []
        chosen = False
        full = self.record.arguments.complete(args, kwargs)
        for e in [*order, *(e for e in self.entries if e not in order)]:
            if e not in order:
                reason: str | None = "not in the order in force"
            elif not e.runs_on(slot):
                reason = f"runs on {', '.join(e.options.devices or ())}"
            elif not e.available()[0]:
                reason = f"not available: {e.available()[1]}"
            elif not state.mode <= e.options.flags():
                reason = f"not {' and '.join(sorted(state.mode - e.options.flags()))}"
            elif chosen:
                reason = "an earlier provider runs"
            elif e.options.supports is not None and not e.options.supports(*full[0], **full[1]):
                reason = "supports() returned False"
            else:
                reason, chosen = None, True
            found.append((e, reason))
        return found

    def refusal(self, slot: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> RuntimeError:
        """The error of a call no provider takes."""
        reasons = "; ".join(f"{e.name}: {why}" for e, why in self.declined(slot, current_state(), args, kwargs))
        return RuntimeError(
            f"{self.record.qualname}: no provider runs this call ({describe_call(self.record, args, kwargs)}): {reasons}. "
            f"Add a provider that accepts it, or let one that does run (opclass.use_providers / set_provider_order / {ENV})"
        )

    def dispatch_kernel(self, slot: str | None) -> Callable[..., Any]:
        """The kernel the dispatcher calls at the slot's key: it chooses on every call."""
        table, complete, profiling = self, self.record.arguments.complete, _C._autograd._profiler_enabled
        qualname = self.record.qualname

        def choose(*args: Any, **kwargs: Any) -> Any:
            full = None
            for e in table.now(slot):
                if e.options.supports is not None:
                    full = full or complete(args, kwargs)
                    if not e.options.supports(*full[0], **full[1]):
                        continue
                if profiling():
                    with torch.profiler.record_function(f"{qualname} [{e.name}]"):
                        return e.checked(*args, **kwargs)
                return e.checked(*args, **kwargs)
            raise table.refusal(slot, args, kwargs)

        return choose

    def traced(self, slot: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Callable[..., Any] | None:
        """The user's function of the provider this call would run (torch.compile traces into
        it, for a ``traceable`` op: chosen at trace time, on FakeTensors), or ``None``."""
        full = self.record.arguments.complete(args, kwargs)
        return next((e.raw for e in self.now(slot) if e.options.supports is None or e.options.supports(*full[0], **full[1])), None)

    def kernel(self, slot: str | None, dispatched: Callable[..., Any]) -> Kernel:
        """What the fast path calls for the slot under the global state: the first candidate's
        kernel itself when it has no predicate, else a chooser; ``checked`` is the dispatcher's."""
        entries = self.static[slot]
        if entries and entries[0].options.supports is None:
            first = entries[0]
            return Kernel(first.name, first.fn, dispatched, first.where)
        table, outputs = self, self.record.outputs
        finish, fresh, single = outputs.finish, output_is_fresh(), outputs.single
        choices = [(e.options.supports, e.fn, e.where) for e in entries]

        def chooser(*args: Any, **kwargs: Any) -> Any:
            # Called by the class call's fast path only, with every argument passed.
            for supports, fn, where in choices:
                if supports is None or supports(*args, **kwargs):
                    out = fn(*args, **kwargs)
                    if not (single and fresh(out)):  # the output contract, naming this provider
                        out = finish(where, args, kwargs, out)
                    return out
            raise table.refusal(slot, args, kwargs)

        # The fast path inlines the choice: each candidate up to the first that takes every call.
        upto = next((i + 1 for i, e in enumerate(entries) if e.options.supports is None), len(entries))
        inline = tuple((e.options.supports, e.fn, e.where) for e in entries[:upto])
        return Kernel(self.hook, chooser, dispatched, self.record.where(self.hook), inline)

    def shown(self) -> str:
        order = self.ordered(global_state())
        parts = []
        for e in order:
            notes = [", ".join(e.options.devices) if e.options.devices else "any device", *sorted(e.options.flags())]
            if not e.available()[0]:
                notes.append("unavailable")
            if e.options.supports is not None:
                notes.append("supports()")
            parts.append(f"{e.name} ({'; '.join(notes)})")
        return "providers: " + ", ".join(parts)


def describe_call(record: OpRecord, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``x: Tensor(float16, [4, 64], cuda:0), eps: 1e-06``: a call's arguments, metadata only."""

    def show(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            layout = "" if v.is_contiguous() else ", not contiguous"
            return f"Tensor({str(v.dtype).removeprefix('torch.')}, {list(v.shape)}, {v.device}{layout})"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(show(e) for e in v) + "]"
        return repr(v)

    values = record.arguments.values(args, kwargs, _NOT_GIVEN)
    return ", ".join(f"{a.name}: {show(v)}" for a, v in zip(record.arguments, values) if v is not _NOT_GIVEN)


_NOT_GIVEN: Any = object()
#: The table of each live install with providers (for explain, refresh, testing).
TABLES: dict[OpRecord, Table] = {}


def table_of(record: OpRecord) -> Table | None:
    return TABLES.get(record)


def entries_of(record: OpRecord) -> Iterator[Entry]:
    table = TABLES.get(record)
    return iter(table.entries if table is not None else ())
