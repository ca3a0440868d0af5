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
from typing import Any, Iterator, Mapping

__all__ = ["ENV", "MODE_ENV", "FLAGS", "State", "Block", "BLOCK", "global_state", "current", "set_order", "set_mode", "block", "ENV_STATE", "version"]

ENV, MODE_ENV = "OPCLASS_PROVIDERS", "OPCLASS_PROVIDER_MODE"
FLAGS = ("batch_invariant", "deterministic")


@dataclasses.dataclass(frozen=True)
class State:
    """Orders by op name (an op absent: its declaration's order) and the flags the mode requires."""

    orders: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    mode: frozenset[str] = frozenset()

    def over(self, base: State) -> State:
        """This state's orders and mode over ``base``'s."""
        return State({**base.orders, **self.orders}, base.mode | self.mode)


def _parse_env() -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    orders: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (part.strip() for part in os.environ.get(ENV, "").split(";"))):
        op, sep, names = item.partition("=")
        if not sep or "::" not in op or not names.strip():
            raise ValueError(f"{ENV}={os.environ[ENV]!r}: write op=provider,provider;... e.g. 'mylib::rms_norm=triton,default'")
        orders[op.strip()] = tuple(n.strip() for n in names.split(",") if n.strip())
    mode = frozenset(m.strip() for m in os.environ.get(MODE_ENV, "").split(",") if m.strip())
    if mode - set(FLAGS):
        raise ValueError(f"{MODE_ENV}={os.environ[MODE_ENV]!r}: {', '.join(sorted(mode - set(FLAGS)))} is no flag; the flags are {', '.join(FLAGS)}")
    return orders, mode


#: The deployment's orders and mode, as the variables said at import.
ENV_STATE = State(*_parse_env())
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
    _set(State(orders, _code.mode))


def set_mode(flags: frozenset[str]) -> None:
    """The mode in code: the flags every provider that runs must have."""
    _set(State(_code.orders, flags))


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


@contextlib.contextmanager
def block(own: State) -> Iterator[None]:
    """Open a block of ``own`` over the blocks already open in this context."""
    outer = BLOCK.get()
    token = BLOCK.set(Block(own if outer is None else own.over(outer.own)))
    try:
        yield
    finally:
        BLOCK.reset(token)
