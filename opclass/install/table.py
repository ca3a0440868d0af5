"""The kernel table of one install: every backend kernel of the op (a device hook's, ``default``,
each provider, one added from outside) is an :class:`Entry` with its device types, predicate,
availability, flags and tolerances. Hooks add entries (and wrappers); the install registers each
dispatch slot once, from the table. :class:`Choice`, compiled once per (slot, order, mode), says
which entry runs a call, on every route (docs/design.md, "The kernel table and the choice"): of
the entries in the order in force (:mod:`opclass.install.orders`; by default the providers, then
the device's own kernel, then ``default``), available and flagged for the mode, the first whose
predicate accepts the call; predicates run at most once per call. A provider that raises
raises: the next one is no fallback for a broken kernel.

Example:
    >>> import torch, opclass
    >>> class DocsTable(opclass.CustomOp, name="docs_table::neg"):
    ...     @staticmethod
    ...     def default(x: torch.Tensor) -> torch.Tensor:
    ...         return -x
    >>> [(e.name, e.options.devices) for e in DocsTable.record.table.entries]
    [('default', None)]
    >>> opclass.remove(DocsTable)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

import torch
from torch import _C

from opclass.core.shield import shield
from opclass.errors import did_you_mean, first_line, definition_error
from opclass.install import orders
from opclass.install.explain import describe_call
from opclass.install.options import Options
from opclass.install.tuning import Bucket, Tuning, bucket_function, explained, in_front, refusal
from opclass.install.outputs import output_is_fresh

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

__all__ = ["Entry", "Kernel", "Choice", "KernelTable", "slot_key"]

_COMPOSITE = "CompositeExplicitAutograd"
#: What ``available()`` raises when the provider cannot run here (anything else is a bug in it).
UNAVAILABLE = (ImportError, OSError, RuntimeError)


@dataclasses.dataclass(eq=False)
class Entry:
    """One kernel of the op. ``fn`` is what the fast paths call, ``checked`` what the dispatcher
    calls (``fn`` held to the output contract), ``raw`` the user's function (what torch.compile
    traces into), ``own`` marks the op's own device or ``default`` kernel (else a provider)."""

    name: str
    fn: Callable[..., Any]
    where: str
    options: Options
    own: bool
    raw: Callable[..., Any]
    #: The hook that added it (whose installer was running).
    hook: str
    table: KernelTable
    checked: Callable[..., Any] = dataclasses.field(default=lambda *a, **k: None)
    _available: tuple[bool, str] | None = None
    #: A lazy provider's declared options (its ``options.supports`` is :meth:`loads_first`, the
    #: predicate that loads it when a choice first reaches it, until it loads), and whether it has not yet.
    declared: Options | None = None
    pending: bool = False

    def available(self, load: bool = True) -> tuple[bool, str]:
        """``(available, why not)``, asked once. ``available()`` raising ImportError, OSError or
        RuntimeError (a library, a shared object or a device missing) says "no", with its text as
        the reason; any other exception is a bug in ``available()`` and surfaces. A lazy provider
        is loaded first (``load=False``: not loaded, a candidate whose predicate loads it)."""
        if self.pending and self.declared is not None:
            if not load:
                return True, ""
            self.declared.lazy.settle(self, self.declared, LOADED)  # type: ignore[union-attr]  # lazy where pending
        if self._available is None:
            check, why, record = self.options.available, "available() returned False", self.table.record
            try:
                found = True if check is None else check()
            except UNAVAILABLE as e:
                found, why = False, f"available() raised {first_line(e)}"
            except Exception as e:
                problem = f"available() raised {first_line(e)}, which says nothing about whether the provider can run"
                fix = "fix available(); to say the provider cannot run here, return False or raise ImportError('what is missing')"
                raise definition_error(record.cls_name, self.name, self.raw, problem, fix) from e
            if type(found) is not bool:
                raise definition_error(record.cls_name, self.name, self.raw, f"available() returned {found!r}, not a bool", "return True or False (e.g. find_spec('lib') is not None)")
            self._available = (found, "" if found else why)
        return self._available

    def loads_first(self, *args: Any, **kwargs: Any) -> bool:
        """A lazy provider's predicate until it is loaded: load it, then answer as its own ``supports``."""
        if not self.available()[0]:
            return False
        own = self.options.supports
        return True if own is None else own(*args, **kwargs)

    @property
    def came_from(self) -> list[str]:
        """Notes for listings: where a provider added from outside its class came from, and
        ``not loaded yet: module:attr`` for a lazy one not loaded yet."""
        lazy = self.declared.lazy if self.pending and self.declared is not None else None
        return [n for n in (self.options.origin, f"not loaded yet: {lazy.target}" if lazy is not None else "") if n]

    def declined(self) -> str:
        """Why a candidate did not take a call: its predicate said no, or (a lazy provider) it failed to load."""
        return "supports() returned False" if self._available is None or self._available[0] else f"not available: {self._available[1]}"

    def runs_on(self, device: str | None) -> bool:
        return self.options.devices is None or device in self.options.devices

    @property
    def runs_where(self) -> str:
        """``cpu, cuda``, or ``any device``: how explanations name where it runs."""
        return ", ".join(self.options.devices) if self.options.devices else "any device"

    def excluded(self, slot: str | None, mode: frozenset[str]) -> str | None:
        """Why this entry, in the order in force, is no candidate on ``slot`` under ``mode`` (``None``: it is)."""
        if not self.runs_on(slot):
            return f"runs on {', '.join(self.options.devices or ())}"
        if self.options.platform is not None and orders.platform(slot) != self.options.platform:
            return f"needs {self.options.platform}, this is {orders.platform(slot)}"
        if self.options.capability is not None and (why := orders.outside(self.options.capability)) is not None:
            return why
        if not self.available(load=False)[0]:  # compiling a choice imports no lazy provider
            return f"not available: {self.available(load=False)[1]}"
        missing = mode - self.options.flags()
        return f"not {' and '.join(sorted(missing))}" if missing else None


@dataclasses.dataclass(frozen=True)
class Kernel:
    """What a plain call on one slot runs (:meth:`OpRecord.kernel_for` answers with it): ``user``
    for the fast path (which finishes the output inline), ``checked`` for the dispatcher, named
    after ``hook`` (``"cpu"``, ``"default"``, ``"providers"``) and ``where``. ``choice``, where the
    op has providers: the :class:`Choice` under the process-wide state (``user`` is then its first
    candidate where that takes every call, else :meth:`Choice.fast`)."""

    hook: str
    user: Callable[..., Any]
    checked: Callable[..., Any]
    where: str
    choice: Choice | None = None


class Choice:
    """Which entry runs a call on one slot (``None``: every device type without a kernel of its
    own) under one state: the candidates in order, each other entry with why it is none."""

    def __init__(self, table: KernelTable, slot: str | None, state: orders.State) -> None:
        self.table = table
        # The reference mode: the op's own kernels, and no provider, whatever the order.
        reference, flags = orders.MODES[-1] in state.mode, state.mode & frozenset(orders.FLAGS)
        ranked = [e for e in table.entries if e.own] if reference else table.ranked(state, slot)
        #: Every entry, the candidates in order first, with why it is no candidate (``None``: it is).
        self.reasons: list[tuple[Entry, str | None]] = [(e, e.excluded(slot, flags)) for e in ranked]
        self.reasons += [(e, "a provider, and the mode is reference" if reference else "not in the order in force") for e in table.entries if e not in ranked]
        candidates = [e for e, why in self.reasons if why is None]
        upto = next((i + 1 for i, e in enumerate(candidates) if e.options.supports is None), len(candidates))
        #: The names the order in force gives that the op does not have: every call is refused
        #: (an order that cannot apply is an error, not a shorter order; the reference mode reads none).
        self.missing = [] if reference else [n for n in table.order(state, slot) or () if n not in {e.name for e in table.entries} and n != orders.REST]
        #: What a call may run, in order: up to the first candidate without a predicate.
        self.tried: tuple[Entry, ...] = () if self.missing else tuple(candidates[:upto])
        self._complete = table.record.arguments.complete
        #: The op's tuning table where it applies (none in the reference mode), and the call's bucket.
        self.tuned: Tuning | None = None if reference or self.missing else table.tuning(state, slot)
        self.bucket: Callable[..., Bucket | None] = lambda *args, **kwargs: None
        #: By place in ``tried``, a table's predicate as the C entry tests it (tuning.native_test).
        self.native_tests: dict[int, Any] = {}
        if self.tuned is not None:
            self.bucket = bucket_function(self.tuned.sizes, table.record.arguments)
            front, self.native_tests = in_front(self.tuned, candidates, table.record.arguments)
            self.tried = (*front, *self.tried)

    def pick(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Entry | None:
        """The entry that runs ``op(*args, **kwargs)`` (``None``: none takes it); each predicate
        runs at most once, with the op's arguments (defaults filled in)."""
        full = None
        for e in self.tried:
            supports = e.options.supports
            if supports is None:
                return e
            full = full or self._complete(args, kwargs)
            said = supports(*full[0], **full[1])
            if said is True:
                return e
            if said is not False:
                not_bool(e, said)
        return None

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """The dispatcher's kernel: the chosen entry, checked by the output contract."""
        e = self.pick(args, kwargs)
        if e is None:
            self.refuse(*args, **kwargs)
        if _PROFILING():
            with torch.profiler.record_function(f"{self.table.qualname} [{e.name}]"):
                return e.checked(*args, **kwargs)
        return e.checked(*args, **kwargs)

    def fast(self, *args: Any, **kwargs: Any) -> Any:
        """The fast paths' call (every argument passed): the chosen entry, its output finished as
        the contract says, naming it."""
        e = self.pick(args, kwargs)
        if e is None:
            self.refuse(*args, **kwargs)
        out, outputs = e.fn(*args, **kwargs), self.table.record.outputs
        return out if outputs.single and _FRESH(out) else outputs.finish(e.where, args, kwargs, out)

    def refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Raise the error of a call no entry takes (every route raises this one)."""
        reasons = "; ".join(f"{e.name}: {why or e.declined()}" for e, why in self.reasons)
        record = self.table.record
        if self.missing:
            known = [e.name for e in self.table.entries]
            guesses = [f"{n!r} (did you mean {g!r}?)" if (g := did_you_mean(n, known)) else repr(n) for n in self.missing]
            raise RuntimeError(
                f"{record.qualname}: {orders.source(record.qualname)} names provider {', '.join(guesses)}, which it does not have (it has {', '.join(known)}); "
                f"the order cannot apply, so no call runs. Add the provider (import the package that adds it), or name only providers it has"
            )
        raise RuntimeError(
            f"{record.qualname}: no provider runs this call ({describe_call(record, args, kwargs)}): {reasons}. "
            f"Add a provider that accepts it, or let one that does run (opclass.use_providers / set_provider_order / {orders.ENV})"
        )

    def explain(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[Entry, str | None]]:
        """Each entry with why it does not run this call (``None``: it runs; ``runs (...)``: it
        runs, as the tuning table says), in order."""
        chosen = self.pick(args, kwargs)
        declined = self.tried if chosen is None else self.tried[: self.tried.index(chosen)]
        blocked = f"the order names {', '.join(map(repr, self.missing))}, which the op does not have" if self.missing else "an earlier provider runs"
        why_not = {e: e.declined() if e in declined else blocked for e, why in self.reasons if why is None}
        runs = None
        if self.tuned is not None and chosen is not None:  # the table's candidates are copies: named by name
            full = self._complete(args, kwargs)
            runs, notes = explained(self.tuned, self.bucket(*full[0], **full[1]), chosen.name)
            why_not.update((e, notes[e.name]) for e, why in self.reasons if why is None and e.name in notes)
        name = None if chosen is None else chosen.name
        return [(e, runs if e.name == name else why_not.get(e, why)) for e, why in self.reasons]


def not_bool(e: Entry, said: object) -> NoReturn:
    """A predicate answered something other than ``True`` or ``False`` (a ``def`` without
    ``return`` says ``None``): an error, not a "no"."""
    raise TypeError(f"{e.where}: supports() returned {said!r} ({type(said).__name__}), not a bool; return True or False (a def without return says None)")


_PROFILING = _C._autograd._profiler_enabled
_FRESH = output_is_fresh()
#: Called with the op's record after one of its lazy providers loaded: ``opclass.lifecycle``
#: compiles the op's choices again (this layer cannot call up).
LOADED: list[Callable[[OpRecord], None]] = []


class KernelTable:
    """The kernels of one install (see the module docstring). Hooks add entries and wrappers
    while the op installs; :meth:`register` then registers each slot once."""

    def __init__(self, record: OpRecord) -> None:
        # An overload of the class's other conventions chooses as the functional op does: its orders, modes and tables.
        self.record, self.qualname = record, record.convention.base or record.qualname
        self.entries: list[Entry] = []
        #: Made once the table is registered: slot -> what a plain call there runs.
        self.kernels: dict[str | None, Kernel] = {}
        self._wrappers: list[Callable[[Entry], Callable[..., Any] | None]] = []
        self._static: dict[str | None, Choice] = {}
        self._memo: dict[tuple[Any, ...], Choice] = {}
        #: A trace chose from this table: graphs compiled then keep that choice.
        self.traced = False
        #: The op's default orders per platform (``provider_orders``), for the slots of their device types.
        self.platform_orders: dict[str, tuple[str, ...]] = {}

    def add(self, name: str, fn: Callable[..., Any], options: Options, *, own: bool, raw: Callable[..., Any] | None = None) -> None:
        """Add a kernel: the op's own (``own``: a device hook's or ``default``), else a provider."""
        if options.supports is not None and self.record.convention.kind == "out":
            # The predicate takes the functional op's arguments: the out buffers are not its business.
            options = dataclasses.replace(options, supports=_without(options.supports, self.record.convention.outs))
        entry = Entry(name, fn, self.record.where(name), options, own, fn if raw is None else raw, self.record.lib.installing, self)
        if options.lazy is not None:  # a candidate with a predicate that loads it (Entry.loads_first)
            entry.declared, entry.pending, entry.options = options, True, dataclasses.replace(options, supports=entry.loads_first)
        self.entries.append(entry)

    def wrap(self, wrapper: Callable[[Entry], Callable[..., Any] | None]) -> None:
        """Have every entry's ``fn`` replaced by ``wrapper(entry)`` where that is not ``None``
        (applied at :meth:`register`, whatever the order hooks install in)."""
        self._wrappers.append(wrapper)

    def own(self) -> dict[str | None, Entry]:
        """The op's own kernels by slot (``None``: its ``default``)."""
        return {e.options.devices[0] if e.options.devices else None: e for e in self.entries if e.own}

    def own_where(self, device: str) -> str | None:
        """How errors name the op's own kernel for ``device`` (else its ``default``), if any."""
        found = self.own().get(device) or self.own().get(None)
        return found.where if found is not None else None

    def entry(self, name: str) -> Entry:
        return next(e for e in self.entries if e.name == name)

    @property
    def has_providers(self) -> bool:
        """Whether each call chooses: the op has providers, or an own kernel that may decline
        (``supports``/``available`` given to ``opclass.provider`` on it)."""
        return any(not e.own or e.options.supports or e.options.available for e in self.entries)

    @property
    def _chooser(self) -> str:
        """How the kernel that chooses is named: after the hook that added the providers."""
        return next((e.hook for e in self.entries if not e.own), self.entries[0].hook)

    def register(self) -> None:
        """Register each slot's kernel once: an entry's own where the op has no providers, else the
        slot's chooser."""
        # The providers first (declaration order), then each device's own kernel, then default.
        self.entries.sort(key=lambda e: (e.own, e.own and e.options.devices is None))
        for e in self.entries:
            for wrapper in self._wrappers:
                e.fn = wrapper(e) or e.fn
            e.fn = shield(e.fn) if e.own else e.fn  # the fast path calls it with no wrapper around it
            e.checked = self.record.outputs.checked(e.where, e.fn)
        lib, name = self.record.lib, self.record.overload_name()
        self.refresh()
        if not self.has_providers:
            self.kernels.update((slot, Kernel(e.name, e.fn, e.checked, e.where)) for slot, e in self.own().items())
        for slot, kernel in self.kernels.items():
            lib.installing = self._chooser if self.has_providers else kernel.hook
            lib.impl(name, kernel.checked, slot_key(slot))

    def choice(self, slot: str | None, state: orders.State) -> Choice:
        """The choice for ``slot`` under ``state``, compiled once per (slot, order, mode)."""
        key = (slot, *self.key(state))
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) > 64:
                self._memo.clear()
            found = self._memo[key] = Choice(self, slot, state)
        return found

    def key(self, state: orders.State) -> tuple[Any, ...]:
        """What of ``state`` the op's choice depends on (equal keys: equal choices on each slot)."""
        platform_orders = tuple((k, v) for k, v in state.orders.items() if k.startswith(f"{self.qualname}@")) if self.qualname in state.per_platform else ()
        return (state.orders.get(self.qualname), platform_orders, state.mode, orders.facts_set, state.tuned.get(self.qualname))

    def tuning(self, state: orders.State, slot: str | None) -> Tuning | None:
        """The tuning table ``state`` holds for the op, where it applies to ``slot``'s calls: those
        of the device type it was measured on (on ``None``: where that type has no slot of its own),
        and the op as defined here (:func:`opclass.install.tuning.refusal`)."""
        tuned = state.tuned.get(self.qualname)
        if tuned is None or slot not in (tuned.device_type, None) or (slot is None and any(tuned.device_type in (e.options.devices or ()) for e in self.entries)):
            return None
        return tuned if refusal(tuned, {e.name: e.raw for e in self.entries}) is None else None

    def now(self, slot: str | None) -> Choice:
        """The choice for a call in this context."""
        block = orders.BLOCK.get()
        if block is None or not block.concerns(self.qualname):
            return self._static[slot]
        return self.choice(slot, block.state)

    def refresh(self) -> None:
        """The choice under the process-wide state, per slot (after a change of it): a slot per
        device type an entry names, and ``None`` where one runs on every device."""
        if not self.has_providers:
            return
        named = {orders.device_type(p) for p in self.platform_orders}  # a slot for each platform's order
        devices = sorted({d for e in self.entries for d in e.options.devices or ()} | named)
        slots = [*devices, *([None] if any(e.options.devices is None for e in self.entries) else [])]
        state = orders.global_state()
        self._static = {slot: self.choice(slot, state) for slot in slots}
        for slot, choice in self._static.items():
            checked = self.kernels[slot].checked if slot in self.kernels else self._dispatch_kernel(slot)
            first = choice.tried[0] if choice.tried and choice.tried[0].options.supports is None else None
            hook, user, where = (first.name, first.fn, first.where) if first else (self._chooser, choice.fast, self.record.where(self._chooser))
            self.kernels[slot] = Kernel(hook, user, checked, where, choice)

    def _dispatch_kernel(self, slot: str | None) -> Callable[..., Any]:
        """The kernel the dispatcher calls at the slot's key: the choice in the calling context."""
        now = self.now

        def choose(*args: Any, **kwargs: Any) -> Any:
            return now(slot).run(*args, **kwargs)

        return choose

    def order(self, state: orders.State, slot: str | None = None) -> tuple[str, ...] | None:
        """The order ``state`` gives the op on ``slot``'s platform (``op@rocm``), else on every one."""
        name = self.qualname
        if slot is not None and name in state.per_platform:
            return state.orders.get(f"{name}@{orders.platform(slot)}") or state.orders.get(name)
        return state.orders.get(name)

    def ranked(self, state: orders.State, slot: str | None = None) -> list[Entry]:
        """The entries in ``state``'s order for the op on ``slot`` (the default order where it gives
        none: the op's for the slot's platform, else its declaration's; ``...`` in an order: the
        rest of the default order)."""
        given = self.platform_orders.get(orders.platform(slot) or "") if slot is not None and self.platform_orders else None
        default = self.entries if given is None else [self.entry(n) for n in given if n != orders.REST]
        order = self.order(state, slot)
        if order is None:
            return default
        named = [n for n in order if n != orders.REST]
        rest = [e.name for e in default if e.name not in named] if orders.REST in order else []
        at = order.index(orders.REST) if rest else len(order)
        return [e for n in (*order[:at], *rest, *order[at + 1 :]) for e in self.entries if e.name == n]

    def check_order(self, names: Sequence[Any], source: str) -> tuple[str, ...]:
        """``names``, as a tuple, where they are all this op's providers (:func:`orders.check`)."""
        return orders.check(names, [e.name for e in self.entries], self.qualname, source)

    def shown(self) -> str:
        """``providers: a (cpu; supports()), b (any device)``: the order in force, for ``repr(record)``."""
        state = orders.global_state()
        parts = [f"{n} (missing: no call runs)" for n in self.choice(None, state).missing]
        for e in self.ranked(state):
            marks = {"unavailable": not e.available(load=False)[0], "supports()": (e.declared or e.options).supports is not None}
            notes = [e.runs_where, *sorted(e.options.flags()), *(mark for mark, on in marks.items() if on), *e.came_from]
            parts.append(f"{e.name} ({'; '.join(notes)})")
        return "providers: " + ", ".join(parts)


def _without(supports: Callable[..., Any], outs: tuple[str, ...]) -> Callable[..., Any]:
    def predicate(*args: Any, **kwargs: Any) -> Any:
        return supports(*args, **{k: v for k, v in kwargs.items() if k not in outs})

    return predicate


def slot_key(slot: str | None) -> str:
    """The dispatch key of a slot (``None``: every device type)."""
    return _COMPOSITE if slot is None else _C._dispatch_key_for_device(slot)
