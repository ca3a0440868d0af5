"""Choosing among an op's providers, from code: orders and modes (process-wide or for a block),
providers added to an op from another module, what runs for given arguments and why, and tuning.
The providers hook: :mod:`opclass.builtin_hooks.providers`; the choice on every call: the
op's kernel table, :mod:`opclass.install.table`; the orders and modes: :mod:`opclass.install.orders`.

Example:
    >>> import torch, opclass
    >>> class DocsChoice(opclass.CustomOp, name="docs_choice::neg"):
    ...     @staticmethod
    ...     def default(x: torch.Tensor) -> torch.Tensor:
    ...         return -x
    ...     @opclass.provider("cpu")
    ...     @staticmethod
    ...     def numpy(x: torch.Tensor) -> torch.Tensor:
    ...         return torch.from_numpy(-x.numpy())
    >>> with opclass.use_providers({DocsChoice: ["default"]}):
    ...     opclass.explain_providers(DocsChoice, torch.ones(1)).splitlines()[1]
    '  default (any device): runs'
    >>> opclass.remove(DocsChoice)
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import warnings
from types import EllipsisType
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence, overload

from typing_extensions import ParamSpec, TypeVar

import torch

from opclass import _plugins, lifecycle
from opclass.builtin_hooks import providers as hook
from opclass.define.hookspec import ADDED_BY, OPTIONAL
from opclass.install import orders as state
from opclass.install import record as records
from opclass.install.lazy import Lazy
from opclass.install.explain import describe_call
from opclass.install.options import MARK
from opclass.install.table import KernelTable
from opclass.install.tuning import bucket_text, refusal

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["add_provider", "remove_provider", "set_provider_order", "set_provider_mode", "use_providers", "explain_providers", "tune_providers", "providers_of", "provider_order", "which_provider", "ProviderInfo"]


def live_record(op: Any) -> records.OpRecord:
    """The live record of ``op`` (its class or ``"ns::op"``), else a ``TypeError``; the deployment
    variables checked first (a change after import is an error)."""
    state.check_env()
    qualname = op if isinstance(op, str) else getattr(op, "qualname", None)
    record = records.lookup(qualname) if isinstance(qualname, str) else None
    if record is None:
        raise TypeError(f"{op!r} is no live op (pass an op class or its qualified name 'ns::op')")
    return record


def _table(op: Any) -> KernelTable:
    with records.LOCK:  # a redefinition in another thread installs its table whole, under the lock
        record = live_record(op)
        if not record.table.has_providers:
            raise ValueError(f"{record.qualname} ({record.cls_name}) has no providers: declare some with @opclass.provider, or opclass.add_provider")
        return record.table


_Tolerance = float | Mapping[torch.dtype, float] | None
_Capability = tuple[int, int] | tuple[tuple[int, int] | None, tuple[int, int] | None] | None


# Overloads, a "module:function" string first: a function that does not fit the op is then named
# against the op's signature by mypy and pyright alike.
@overload
def add_provider(
    op: Callable[..., Any] | str, name: str, fn: str, device: str | Sequence[str] | None = None, *, supports: Callable[..., bool] | None = None, available: Callable[[], bool] | None = None,
    batch_invariant: bool = False, deterministic: bool = False, atol: _Tolerance = None, rtol: _Tolerance = None, platform: str | None = None, capability: _Capability = None,
) -> None: ...
@overload
def add_provider(
    op: Callable[P, R] | str, name: str, fn: Callable[P, R], device: str | Sequence[str] | None = None, *, supports: Callable[..., bool] | None = None, available: Callable[[], bool] | None = None,
    batch_invariant: bool = False, deterministic: bool = False, atol: _Tolerance = None, rtol: _Tolerance = None, platform: str | None = None, capability: _Capability = None,
) -> None: ...
def add_provider(
    op: Callable[P, R] | str,
    name: str,
    fn: Callable[P, R] | str,
    device: str | Sequence[str] | None = None,
    *,
    supports: Callable[..., bool] | None = None,
    available: Callable[[], bool] | None = None,
    batch_invariant: bool = False,
    deterministic: bool = False,
    atol: float | Mapping[torch.dtype, float] | None = None,
    rtol: float | Mapping[torch.dtype, float] | None = None,
    platform: str | None = None,
    capability: tuple[int, int] | tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None,
) -> None:
    """Add a provider named ``name`` to ``op`` (its class, or ``"ns::op"``) from another module,
    without subclassing: a vendor package adds its kernel to a library's op. The options are
    :func:`opclass.provider`'s. The op's class is defined again with it: ``fn`` is checked
    against the op's signature as a kernel is (an ``OpDefinitionError`` leaves the op as it
    was), and it stays with the op's name, through later redefinitions of its class, until
    :func:`remove_provider`. ``fn`` may be any callable (a ``functools.partial``: its keywords are
    its own; a bound method). Type checkers check ``fn`` against the op's signature (a dropped
    parameter: mypy with the ``opclass.mypy`` plugin only).

    Example:
        >>> import torch, opclass
        >>> class DocsAdded(opclass.CustomOp, name="docs_added::half"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return x / 2
        >>> opclass.add_provider(DocsAdded, "mul", lambda x: x * 0.5, "cpu")
        >>> opclass.explain_providers(DocsAdded, torch.ones(1)).splitlines()[1]
        '  mul (cpu): runs'
        >>> opclass.remove_provider(DocsAdded, "mul")
        >>> opclass.remove(DocsAdded)
    """
    lazy = Lazy(fn) if isinstance(fn, str) else None
    state.check_env()
    record = None if isinstance(op, str) and "::" in op and records.lookup(op) is None else live_record(op)
    qualname = record.qualname if record is not None else str(op)
    if record is None and lazy is None:
        fix = "define the op first (import the module that defines it), or give the provider as a string 'module:function', imported when it is first chosen"
        raise TypeError(f"opclass.add_provider({op!r}, {name!r}, ...): {op} is no live op, so the function cannot be checked against its signature: {fix}")
    mark = hook.provider(device, supports=supports, available=available, batch_invariant=batch_invariant, deterministic=deterministic, atol=atol, rtol=rtol, platform=platform, capability=capability)
    given: Any = fn if lazy is None else lazy.stub
    marked = mark(given).__func__
    marked.__name__ = marked.__qualname__ = name
    by = sys._getframe(1).f_globals.get("__name__", "?")
    setattr(marked, MARK, dataclasses.replace(getattr(marked, MARK), lazy=lazy, origin=_plugins.loading() or f"opclass.add_provider from {by}"))
    if record is None:  # kept by the op's name, for its class statement (which it never fails)
        if not name.isidentifier():
            raise ValueError(f"opclass.add_provider({op!r}, {name!r}, ...): {name!r} is no provider name (orders list names between ',' and ';'): name it as a Python identifier")
        setattr(marked, OPTIONAL, True)
        hook.add(qualname, name, marked)
    else:
        with records.LOCK:
            hook.add(qualname, name, marked)
            lifecycle.redefine(record, undo=lambda: hook.take(qualname, name))
        # A lazy provider never fails a later class statement (as one added before the op).
        setattr(marked, OPTIONAL, lazy is not None)
    # Whom a later redefinition it no longer fits names (its own mistakes are the caller's, above).
    setattr(marked, ADDED_BY, by)
    order = state.current().orders.get(qualname)
    if order is not None and name not in order:
        warnings.warn(f"opclass.add_provider: the order in force for {qualname} ({state.source(qualname)}: {', '.join(order)}) does not name {name!r}, so it will not run until an order names it", UserWarning, stacklevel=2)


def remove_provider(op: Any, name: str) -> None:
    """Remove the provider ``name`` that :func:`add_provider` added to ``op`` (a provider declared in
    the class body goes with the class). Example: in :func:`add_provider`."""
    if isinstance(op, str) and records.lookup(op) is None and name in hook.added(op):  # added before the op's class
        hook.take(op, name)
        return
    record = live_record(op)
    if state.source(record.qualname) == "opclass.use_providers" and name in state.current().orders[record.qualname]:
        raise ValueError(f"opclass.remove_provider: a use_providers block open here names {name!r} for {record.qualname}: remove it after the block")
    with records.LOCK:
        fn = hook.take(record.qualname, name)
        lifecycle.redefine(record, undo=lambda: hook.add(record.qualname, name, fn))
        # The order set in code keeps the others (an order naming a provider that is gone cannot apply).
        order = state.global_state().orders.get(record.qualname)
        if order is not None and name in order and record.qualname not in state.ENV_STATE.orders:
            state.set_order(record.qualname, tuple(n for n in order if n != name) or None)
            refresh_all()
            now = ", ".join(state.global_state().orders.get(record.qualname, ())) or "the declaration's"
            warnings.warn(f"opclass.remove_provider: the order set for {record.qualname} named {name!r}; it now is {now}", UserWarning, stacklevel=2)


def refresh_all() -> None:
    """Compile every live op's choice again (the process-wide orders, mode, tables or platform
    facts changed); a traced traceable op whose choice moved warns (see the message)."""
    with records.LOCK:
        for record in records.live_records():
            table = record.table
            if table.has_providers:
                before = {slot: k.choice and k.choice.tried for slot, k in table.kernels.items()}
                lifecycle.refresh(record)
                if table.traced and before != {slot: k.choice and k.choice.tried for slot, k in table.kernels.items()}:
                    warnings.warn(
                        f"{record.qualname} ({record.cls_name}) is traceable and was traced by torch.compile through torch.ops.{record.namespace}.{record.name} "
                        f"(or a torch.export decomposition), with the provider chosen then: graphs compiled from those calls keep running it (no guard can cover "
                        f"them; class calls, {record.cls_name}(...), are guarded and recompile). Call torch.compiler.reset() to compile them again, or call the class",
                        UserWarning,
                        stacklevel=3,
                    )


def set_provider_order(op: Any, names: Sequence[str | EllipsisType] | None) -> None:
    """The order of ``op``'s providers, process-wide (``None``: the default order): only those
    named are tried, in this order; ``...`` in it stands for the rest of the default order (the
    op's ``provider_orders`` for the call's platform, else its declaration's), which it then
    extends rather than restates: ``["mine", ...]``. The environment's order
    (``OPCLASS_PROVIDERS``) and a block's (:func:`use_providers`) come before it.

    Example:
        >>> import torch, opclass
        >>> class DocsOrder(opclass.CustomOp, name="docs_order::double"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return x * 2
        ...     fast = opclass.provider("cpu")(staticmethod(lambda x: x + x))
        >>> opclass.set_provider_order(DocsOrder, ["default"])
        >>> "providers: default (any device)" in repr(DocsOrder.record)
        True
        >>> opclass.set_provider_order(DocsOrder, None)
        >>> opclass.remove(DocsOrder)
    """
    if names is None:  # whatever the op has now, and whether it is live
        state.set_order(op if isinstance(op, str) else live_record(op).qualname, None)
    else:
        table = _table(op)
        state.set_order(table.qualname, table.check_order(names, "opclass.set_provider_order"))
        if table.qualname in state.ENV_STATE.orders:
            warnings.warn(f"opclass.set_provider_order: {state.ENV} gives the order of {table.qualname}, which comes first: this one applies only once that is unset (in a new process)", UserWarning, stacklevel=2)
    refresh_all()


def set_provider_mode(*, batch_invariant: bool = False, deterministic: bool = False, reference: bool = False) -> None:
    """Restrict every op's providers, process-wide, to those flagged ``batch_invariant`` and/or
    ``deterministic``; with ``reference``, run every op's own kernels (its device kernel, else
    ``default``) and no provider, whatever the orders say: numerics bisection. All ``False``: no
    restriction (``OPCLASS_PROVIDER_MODE`` adds to it: ``batch_invariant,reference``...).

    Example:
        >>> import opclass
        >>> opclass.set_provider_mode(batch_invariant=True)
        >>> opclass.set_provider_mode()
    """
    state.set_mode(_mode(batch_invariant, deterministic, reference))
    refresh_all()


def _mode(*on: bool) -> frozenset[str]:
    return frozenset(m for m, wanted in zip(state.MODES, on) if wanted)


@contextlib.contextmanager
def use_providers(orders: Mapping[Any, Sequence[str | EllipsisType]] | None = None, *, batch_invariant: bool = False, deterministic: bool = False, reference: bool = False) -> Iterator[None]:
    """For the calls made inside the block in its context (its thread, or its asyncio task: a
    ``contextvars`` context): these orders (op class or ``"ns::op"`` -> provider names), and the
    mode (these flags; ``reference``: the ops' own kernels only, see :func:`set_provider_mode`).
    Nestable; the innermost block wins. Other
    threads and tasks are unaffected, and so are the ops the block does not concern: their
    plain calls keep their fast path.

    Example: in the :mod:`opclass.providers` docstring.
    """
    found = {}
    for op, names in (orders or {}).items():
        table = _table(op)
        found[table.qualname] = table.check_order(names, "opclass.use_providers")
    with state.block(state.State(found, _mode(batch_invariant, deterministic, reference))):
        yield


def explain_providers(op: Any, *args: Any, **kwargs: Any) -> str:
    """Which provider runs ``op(*args, **kwargs)`` in this thread, and why each other one does
    not (a provider given as ``"module:function"`` is imported when the choice reaches it, as the
    call would); with no arguments, the providers and their order, with where those added from
    outside came from (importing nothing). Example: in the :mod:`opclass.providers` docstring."""
    record = live_record(op)
    table = record.table
    if not table.has_providers:
        return f"{record.qualname} has no providers: its own kernels run ({', '.join(f'{e.name} ({e.runs_where})' for e in table.entries)})"
    if not args and not kwargs:
        lines = [f"{record.qualname}: providers in order", *(f"  {e.name} ({e.runs_where})" + (": " + "; ".join(e.came_from) if e.came_from else "") for e in table.ranked(state.current()))]
        tuned = state.current().tuned.get(record.qualname)
        if tuned is not None:  # the table's choices go first, per bucket
            why = refusal(tuned, {e.name: e.raw for e in table.entries})
            lines.append(f"tuning table, not used: {why}" if why else "tuning table: " + ", ".join(f"{bucket_text(b)} → {name}" for b, name in tuned.choices.items()))
        return "\n".join(lines)
    try:  # explained only as the op would take it
        record.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"explain_providers: {record.qualname} takes {record.arguments.parameters()}, not these arguments: {e}") from None
    device = record.arguments.device_of(args, kwargs)
    lines = [f"{record.qualname}({describe_call(record, args, kwargs)}) on {device}:"]
    lines += [f"  {e.name} ({e.runs_where}): {why or 'runs'}" for e, why in table.now(device if device in table.kernels else None).explain(args, kwargs)]
    return "\n".join(lines)


def which_provider(op: Any, *args: Any, **kwargs: Any) -> str | None:
    """The name of the kernel ``op(*args, **kwargs)`` runs in this context (a provider, or the
    op's own: ``"default"``, ``"cpu"``...), ``None`` where none takes the call: for logs and
    metrics, as :func:`explain_providers` says it in words.

    Example:
        >>> import torch, opclass
        >>> class DocsWhich(opclass.CustomOp, name="docs_which::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        ...     half = opclass.provider("cpu", supports=lambda x: x.dtype == torch.float16)(staticmethod(lambda x: 0 - x))
        >>> opclass.which_provider(DocsWhich, torch.ones(1)), opclass.which_provider(DocsWhich, torch.ones(1).half())
        ('default', 'half')
        >>> with opclass.use_providers(reference=True):
        ...     opclass.which_provider(DocsWhich, torch.ones(1).half())
        'default'
        >>> opclass.remove(DocsWhich)
    """
    record = live_record(op)
    record.signature.bind(*args, **kwargs)
    device = record.arguments.device_of(args, kwargs)
    table = record.table
    if not table.has_providers:
        return next((e.name for e in table.entries if e.runs_on(device)), None)
    chosen = table.now(device if device in table.kernels else None).pick(args, kwargs)
    return None if chosen is None else chosen.name


class ProviderInfo(NamedTuple):
    """One kernel of an op, as :func:`providers_of` lists it.

    Example:
        >>> import opclass
        >>> opclass.ProviderInfo("fast", ("cpu",), frozenset(), True, "", "class body", True).devices
        ('cpu',)
    """

    name: str
    #: The device types it runs on (``None``: every one).
    devices: tuple[str, ...] | None
    #: Its flags (``batch_invariant``, ``deterministic``).
    flags: frozenset[str]
    available: bool
    #: Why it is not available here (``""`` where it is).
    why_not: str
    #: ``"class body"``, ``"opclass.add_provider from <module>"``, ``"plugin <name> (<distribution> <version>)"``
    #: (added while that plugin loaded), or ``"own kernel"`` (``default``, ``cpu``...).
    origin: str
    #: Whether the order in force in this context names it (a mode may still exclude it).
    in_order: bool
    #: The platform it needs within its device type (``"rocm"``), if any.
    platform: str | None = None
    #: The CUDA compute capabilities it runs on, ``(lowest, highest)`` (``None``: open), if given.
    capability: tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None


def providers_of(op: Any) -> list[ProviderInfo]:
    """The kernels of ``op`` that calls choose among (providers, then its own), in the order in
    force in this context first: values for logs, metrics and checks (:func:`explain_providers`
    says the same as text). An op without providers lists its own kernels. It asks each one
    whether it is available: a provider given as ``"module:function"`` is imported then, as its
    first call would (:func:`explain_providers` and ``repr(Op.record)`` import nothing).

    Example:
        >>> import torch, opclass
        >>> class DocsListed(opclass.CustomOp, name="docs_listed::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        ...     fast = opclass.provider("cpu", deterministic=True)(staticmethod(lambda x: 0 - x))
        >>> [(p.name, p.devices, sorted(p.flags), p.available, p.origin) for p in opclass.providers_of(DocsListed)]
        [('fast', ('cpu',), ['deterministic'], True, 'class body'), ('default', None, [], True, 'own kernel')]
        >>> opclass.provider_order(DocsListed)
        ('fast', 'default')
        >>> opclass.remove(DocsListed)
    """
    record = live_record(op)
    table = record.table
    ranked = table.ranked(state.current()) if table.has_providers else table.entries
    listed = []
    for e in [*ranked, *(e for e in table.entries if e not in ranked)]:
        origin = "own kernel" if e.own else e.options.origin or "class body"
        listed.append(ProviderInfo(e.name, e.options.devices, e.options.flags(), *e.available(), origin, e in ranked, e.options.platform, e.options.capability))
    return listed


def provider_order(op: Any, device: str | None = None) -> tuple[str, ...]:
    """The order of ``op``'s providers in force in this context for calls on ``device`` (a device
    type; ``None``: the order that names no platform): a ``use_providers`` block's, else
    ``OPCLASS_PROVIDERS``', else :func:`set_provider_order`'s, else the op's ``provider_orders``
    for the device's platform, else the declaration's (providers, then the op's own kernels),
    ``...`` resolved. Example: in :func:`providers_of`."""
    record = live_record(op)
    return tuple(e.name for e in record.table.ranked(state.current(), device))
