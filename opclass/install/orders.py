"""The provider orders and modes in force, and their only writer: the deployment's (read at
import), those set in code, and those of the ``opclass.use_providers`` blocks open in the calling
context (a :class:`contextvars.ContextVar`: its thread, or its asyncio task, and nothing else).
:mod:`opclass.install.table` compiles each op's choice from them.

Example:
    >>> from opclass.install import orders
    >>> orders.current().orders.get("docs_orders::none") is None
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping

from opclass.core.names import DEVICE_TYPES
from opclass.errors import did_you_mean
from opclass.install.tuning import Tuning, read as read_tuning

__all__ = ["ENV", "MODE_ENV", "FLAGS", "MODES", "REST", "Facts", "facts", "set_facts", "facts_set", "platform", "device_type", "outside", "PLATFORMS", "State", "Block", "BLOCK", "global_state", "current", "set_order", "set_mode", "block", "ENV_STATE", "version", "source", "check_env", "near_misses", "repeated", "check", "TUNING_ENV", "set_tuned", "PLUGINS_ENV", "DISABLED_PLUGINS"]

ENV, MODE_ENV = "OPCLASS_PROVIDERS", "OPCLASS_PROVIDER_MODE"
#: The deployment's tuning tables: a JSON file of ``Tuning.save``.
TUNING_ENV = "OPCLASS_TUNING"
#: The installed plugins not to load (``opclass._plugins``): their names, between commas.
PLUGINS_ENV = "OPCLASS_DISABLED_PLUGINS"
FLAGS = ("batch_invariant", "deterministic")
#: A mode is flags every provider that runs must have, and ``reference``: only the op's own
#: kernels run, whatever the order (numerics bisection).
MODES = (*FLAGS, "reference")


@dataclasses.dataclass(frozen=True)
class State:
    """Orders by op name (an op absent: its declaration's order; ``op@rocm``: for one platform),
    the flags the mode requires, and the tuning tables loaded, by op name (a table puts its
    choice per bucket in front of the order)."""

    per_platform: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False)

    orders: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    mode: frozenset[str] = frozenset()
    tuned: Mapping[str, Tuning] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # The ops given an order for one platform (op@rocm), which each choice looks up.
        object.__setattr__(self, "per_platform", frozenset(k.partition("@")[0] for k in self.orders if "@" in k))

    def over(self, base: State) -> State:
        """This state's orders, mode and tables over ``base``'s."""
        return State({**base.orders, **self.orders}, base.mode | self.mode, {**base.tuned, **self.tuned})


#: What orders may be given for: each device type, and ``rocm`` (a HIP build's ``cuda``).
PLATFORMS = (*(d for d in DEVICE_TYPES if d != "hip"), "rocm")
#: In an order, the rest of the default order (the op's for the platform, else its declaration's):
#: ``["mine", "..."]`` extends the default rather than restating it.
REST = "..."


@dataclasses.dataclass(frozen=True)
class Facts:
    """The platform choices are made on: which one the ``cuda`` device type is (``"cuda"``, or
    ``"rocm"`` on a HIP build) and the compute capability of the current CUDA device (``None``:
    none). Tests inject them (``opclass.testing.platform``)."""

    cuda: str = "cuda"
    capability: tuple[int, int] | None = None


_facts: Facts | None = None
#: How many times the facts were set (choices compiled before are stale).
facts_set = 0


def facts() -> Facts:
    """The platform facts, found at first need: only an op whose choice depends on them asks
    (``torch.cuda.get_device_capability`` initializes CUDA)."""
    global _facts
    if _facts is None:
        import torch

        capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
        _facts = Facts("rocm" if torch.version.hip else "cuda", capability)
    return _facts


def set_facts(new: Facts | None) -> Facts | None:
    """Choose as on another platform (``None``: this machine's); returns the facts set before.
    Every op's choice is compiled again (:func:`version` moves)."""
    global _facts, _version, facts_set
    before, _facts, _version, facts_set = _facts, new, _version + 1, facts_set + 1
    return before


def device_type(platform: str) -> str:
    """The device type a platform runs on (``rocm``: ``cuda``)."""
    return "cuda" if platform == "rocm" else platform


def platform(slot: str | None) -> str | None:
    """The platform of a device type: ``rocm`` or ``cuda`` for ``cuda``, else the device type."""
    return facts().cuda if slot == "cuda" else slot


def outside(window: tuple[tuple[int, int] | None, tuple[int, int] | None]) -> str | None:
    """Why this device is outside a window of CUDA compute capabilities (both ends included,
    ``None``: open), or ``None`` where it is inside."""
    low, high = window
    have = facts().capability
    if have is not None and (low is None or have >= low) and (high is None or have <= high):
        return None
    low_text, high_text = (".".join(map(str, c)) if c else "" for c in window)
    wanted = f"{low_text} to {high_text}" if low and high else f"{low_text} or higher" if low else f"up to {high_text}"
    return f"needs compute capability {wanted}, this device has {'.'.join(map(str, have)) if have else 'none (no CUDA device)'}"


def _parse_env(raw: str, raw_mode: str) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    orders: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (part.strip() for part in raw.split(";"))):
        op, sep, text = item.partition("=")
        names, op = tuple(n.strip() for n in text.split(",") if n.strip()), op.strip()
        if not sep or "::" not in op or not names:
            raise ValueError(f"{ENV}={raw!r}: write op=provider,provider;... e.g. 'mylib::rms_norm=triton,default' (op@rocm=...: for one platform)")
        for name in names:
            if not name.isidentifier() and name != REST:
                fix = "separate two ops' entries with ';'" if "=" in name or "::" in name else "a provider's name is a Python identifier"
                raise ValueError(f"{ENV}={raw!r}: {name!r} in the order of {op} is no provider name: {fix}")
        if (twice := repeated(names)) is not None:
            raise ValueError(f"{ENV}={raw!r}: the order of {op} names {twice!r} twice: name each provider once")
        if "@" in op and op.partition("@")[2] not in PLATFORMS:
            raise ValueError(f"{ENV}={raw!r}: {op.partition('@')[2]!r} in {op} is no platform; the platforms are {', '.join(PLATFORMS)}")
        if op in orders:
            raise ValueError(f"{ENV}={raw!r}: {op} has two entries: give each op one")
        orders[op] = names
    mode = frozenset(m.strip() for m in raw_mode.split(",") if m.strip())
    if mode - set(MODES):
        raise ValueError(f"{MODE_ENV}={raw_mode!r}: {', '.join(sorted(mode - set(MODES)))} is no mode; the modes are {', '.join(MODES)}")
    return orders, mode


def check(names: Any, known: list[str], qualname: str, source: str) -> tuple[str, ...]:
    """An order given in code (``source`` names where) for ``qualname``, whose kernels are
    ``known``, as a tuple; a ``TypeError`` / ``ValueError`` says what is wrong with it."""
    if isinstance(names, str):
        raise TypeError(f"{source} takes the provider names of {qualname} as a list, not the string {names!r}: write [{names!r}]")
    order: tuple[Any, ...] = tuple(REST if n is ... else n for n in names)
    if not order or order == (REST,):
        raise ValueError(f"{source}: an empty order for {qualname} would run nothing: name its providers, or pass None for the declaration's order")
    if (twice := repeated(order)) is not None:
        raise ValueError(f"{source} names provider {twice!r} twice for {qualname}: name each once")
    for name in order:
        if not isinstance(name, str):
            raise TypeError(f"{source}: {name!r} in the order of {qualname} is no provider name (str); it has {', '.join(known)}")
        if name not in known and name != REST:
            guess = did_you_mean(name, known)
            raise ValueError(f"{source} names provider {name!r} for {qualname}, which has {', '.join(known)}" + (f": did you mean {guess!r}?" if guess else ""))
    return order


def repeated(names: tuple[str, ...]) -> str | None:
    """A name an order gives twice, which every source of orders refuses."""
    return next((name for name in names if names.count(name) > 1), None)


def _read() -> tuple[str, str, str, str]:
    return os.environ.get(ENV, ""), os.environ.get(MODE_ENV, ""), os.environ.get(TUNING_ENV, ""), os.environ.get(PLUGINS_ENV, "")


def _read_tuning(path: str) -> dict[str, Tuning]:
    try:
        return {t.op: t for t in read_tuning(path)} if path else {}
    except ValueError as e:
        raise ValueError(f"{TUNING_ENV}={path!r}: {e}") from None


_RAW = _read()


def check_env() -> None:
    """The variables as they were at import; a later change is an error, never ignored (each op
    and each choice reads the state parsed at import)."""
    now = _read()
    for name, was, is_now in zip((ENV, MODE_ENV, TUNING_ENV, PLUGINS_ENV), _RAW, now):
        if was != is_now:
            raise RuntimeError(
                f"{name} changed after opclass was imported (from {was!r} to {is_now!r}); opclass reads it once, at import: "
                f"set it before importing opclass (or the library that defines your ops), or use opclass.set_provider_order / set_provider_mode / use_providers / load_tuning in code"
            )


#: The deployment's orders, mode and tuning tables, as the variables said at import.
ENV_STATE = State(*_parse_env(*_RAW[:2]), _read_tuning(_RAW[2]))
#: The plugins the deployment turns off, by name.
DISABLED_PLUGINS = frozenset(filter(None, (name.strip() for name in _RAW[3].split(","))))
_code = State()
#: The process-wide state (the environment's over the code's), replaced whole on each change, and
#: a count of the changes (a block's merged state is recomputed when it moved).
_global = ENV_STATE.over(_code)
_version = 0


def global_state() -> State:
    """The process-wide state: the environment's orders over the code's; both modes."""
    return _global


def version() -> int:
    """How many times the process-wide state changed."""
    return _version


def _set(state: State) -> None:
    global _code, _global, _version
    _code, _global, _version = state, ENV_STATE.over(state), _version + 1


def set_order(qualname: str, names: tuple[str, ...] | None) -> None:
    """The order of ``qualname``'s providers in code (``None``: the declaration's)."""
    orders = {k: v for k, v in _code.orders.items() if k != qualname}
    if names is not None:
        orders[qualname] = names
    _set(dataclasses.replace(_code, orders=orders))


def set_mode(flags: frozenset[str]) -> None:
    """The mode in code: the flags every provider that runs must have."""
    _set(dataclasses.replace(_code, mode=flags))


def set_tuned(qualname: str, tuned: Tuning | None) -> None:
    """The tuning table of ``qualname`` loaded in code (``None``: none); nothing changes where it is the one in force."""
    if _code.tuned.get(qualname) is not tuned:
        _set(dataclasses.replace(_code, tuned={**{k: v for k, v in _code.tuned.items() if k != qualname}, **({qualname: tuned} if tuned else {})}))


class Block(dict[Any, Any]):
    """One open ``use_providers`` block, with those around it in its context: its own state, and,
    as a dict, what the call paths cache per op for it (an op's key -> its choice, or ``None``
    where the block does not concern the op; the C entry reads it without a Python call)."""

    def __init__(self, own: State) -> None:
        self.own, self._merged, self._version = own, own.over(global_state()), version()

    def concerns(self, qualname: str) -> bool:
        return bool(self.own.mode) or qualname in self.own.orders

    @property
    def state(self) -> State:
        """The block's state over the process-wide one (as it is now)."""
        if self._version != version():
            self._merged, self._version = self.own.over(global_state()), version()
            self.clear()
        return self._merged


#: The innermost block open in this context (``None``: none).
BLOCK: contextvars.ContextVar[Block | None] = contextvars.ContextVar("opclass_providers", default=None)


def current() -> State:
    """The state a call in this context sees: its blocks over the process-wide state."""
    open_block = BLOCK.get()
    return global_state() if open_block is None else open_block.state


def near_misses(qualname: str, live: Callable[[str], bool]) -> list[str]:
    """The ops the deployment's orders name that are no ``live`` op and that ``qualname`` looks
    like: typos, which would otherwise never apply with no word."""
    ops = {name.partition("@")[0] for name in ENV_STATE.orders}  # op@rocm: an order of op
    return [name for name in ops if name != qualname and not live(name) and did_you_mean(name, [qualname]) == qualname]


def source(qualname: str) -> str:
    """What set the order in force for ``qualname`` in this context, as errors name it."""
    open_block = BLOCK.get()
    if open_block is not None and qualname in open_block.own.orders:
        return "opclass.use_providers"
    return ENV if qualname in ENV_STATE.orders else "opclass.set_provider_order"


@contextlib.contextmanager
def block(own: State) -> Iterator[None]:
    """Open a block of ``own`` over the blocks already open in this context."""
    outer = BLOCK.get()
    token = BLOCK.set(Block(own if outer is None else own.over(outer.own)))
    try:
        yield
    finally:
        BLOCK.reset(token)
