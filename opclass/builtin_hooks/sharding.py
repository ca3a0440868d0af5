"""The ``sharding`` hook: an op's DTensor sharding strategies, through ``register_sharding``.

``sharding(x, factor)`` takes the op's parameters (every one, defaults included), Tensors replaced
by their ``DTensorSpec``, and returns the acceptable ``(output placements, input placements)``
pairs, which are checked so that a mistake names the op; DTensor picks the cheapest,
redistributes, and runs the op's own kernels on the local shards. What DTensor must not
redistribute is *pinned*: the arguments the op mutates (it would write into a copy) and
keyword-only Tensors (DTensor never moves keyword arguments): strategies that move them are
dropped, and if none is left the call says so. Every argument joins DTensor's sharding cache key.

Importing ``torch.distributed.tensor`` is dear, so a definition does not: the strategy is
registered once it is imported (:mod:`opclass.core.after_import`), before any DTensor can reach
the op; without ``torch.distributed`` the hook installs nothing. Removing the op takes the
strategy out of DTensor's propagator and clears its caches, which hold the old op.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Collection, Sequence

import torch

from opclass.core import after_import, memo
from opclass.core.compat import dtensor_refused_out, tagged_inplace, tagged_out
from opclass.core.types import holds_tensor, returns_of
from opclass.define.hookspec import Hook, HookContext, positional_count
from opclass.install.record import OpRecord

if TYPE_CHECKING:
    from torch.distributed.tensor._op_schema import OpSchema, StrategyType

__all__ = ["sharding_hook"]

_DTENSOR = "torch.distributed.tensor"
#: Guards _PENDING and _REGISTERED. Never held while importing (see _install_sharding).
_LOCK = threading.Lock()
#: Ops defined before DTensor was imported, with the user's function: registered when it is.
_PENDING: dict[OpRecord, Callable[..., Any]] = {}
#: What each record put into DTensor's propagator: the op and the strategy function under it.
_REGISTERED: dict[OpRecord, tuple[torch._ops.OpOverload, Callable[..., Any]]] = {}


def _check_sharding(fn: Any, ctx: HookContext) -> None:
    keyword = [a.name for a in ctx.arguments.keyword_only]
    params = ctx.arguments.parameters(defaults=False)[1:-1]
    fix = f"write sharding({params}) returning [(output placements, input placements), ...]"
    n = positional_count(fn)
    if n is not None and n != len(ctx.arguments.positional):
        ctx.fail(f"takes {n} positional parameters, but the op has {len(ctx.arguments.positional)}", fix)
    if keyword:
        try:
            sig = memo.signature(fn).parameters
        except (TypeError, ValueError):
            sig = None
        if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.values()):
            if missing := [k for k in keyword if k not in sig or sig[k].kind is not inspect.Parameter.KEYWORD_ONLY]:
                ctx.fail(f"does not take the op's keyword-only argument(s) {', '.join(missing)} as keyword-only parameters", fix)
    returns_tensor = any(holds_tensor(r) for r in returns_of(ctx.schema))
    generated_fake = tagged_inplace(ctx.tags) or tagged_out(ctx.tags)
    if returns_tensor and not generated_fake and "abstract" not in ctx.defined:
        ctx.fail(
            "DTensor computes the output shapes with the op's fake kernel, and the op has none",
            f"define abstract({params}) returning empty outputs of the right shape",
        )


def _wrap_user_fn(record: OpRecord, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function given to register_sharding: every argument in, checked placement lists out."""
    from torch.distributed.tensor.placement_types import Placement

    table = record.arguments
    n_outputs = len(record.schema.returns)
    names = ", ".join(table.names)
    where = record.where("sharding")

    def sharding(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        # The dispatcher leaves out arguments that equal their defaults: put them back.
        full, kw = table.complete(args, kwargs)
        # A list of Tensors arrives as a tuple of specs and takes one placement per element.
        expected = sum(len(v) if a.is_list and a.holds_tensor and isinstance(v, (list, tuple)) else 1 for a, v in zip(table, (*full, *kw.values())))
        result = fn(*full, **kw)
        if isinstance(result, (str, bytes)) or not isinstance(result, Sequence) or not result:
            raise TypeError(f"{where} returned {result!r}; return a non-empty list of (output placements, input placements) pairs")
        pairs: list[tuple[list[Any], list[Any]]] = []
        for i, pair in enumerate(result):
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise TypeError(f"{where}: entry {i} is {pair!r}, not an (output placements, input placements) pair")
            outputs, inputs = pair
            if not isinstance(outputs, Sequence) or len(outputs) != n_outputs:
                raise TypeError(f"{where}: entry {i} gives output placements {outputs!r}, but the op has {n_outputs} output(s); give a list with one placement per output")
            if not isinstance(inputs, Sequence) or len(inputs) != expected:
                raise TypeError(
                    f"{where}: entry {i} gives input placements {inputs!r}, but this call has {expected} input(s) ({names}); give a list "
                    "with one placement per argument (None for a non-Tensor, one per element for a list of Tensors)"
                )
            for p in (*outputs, *inputs):
                if p is not None and not isinstance(p, Placement):
                    raise TypeError(f"{where}: entry {i}: {p!r} is not a placement (Shard(dim), Replicate(), Partial()) or None")
            pairs.append((list(outputs), list(inputs)))
        return pairs

    sharding.__qualname__ = f"{record.cls_name}.sharding"
    return sharding


def _pinned(record: OpRecord) -> frozenset[str]:
    """Arguments DTensor must not redistribute: the mutated ones and keyword-only Tensors."""
    return frozenset(record.mutated_names) | {a.name for a in record.arguments.keyword_only if a.holds_tensor}


def _keep_placements(record: OpRecord, registered: Callable[[OpSchema], StrategyType]) -> Callable[[OpSchema], StrategyType]:
    """``registered``, without the strategies that would redistribute a pinned argument."""
    from torch.distributed.tensor._op_schema import OpStrategy
    from torch.utils._pytree import tree_leaves

    pinned = _pinned(record)
    positional = [a.name for a in record.arguments.positional]
    # out= arguments as DTensor sees them (keyword-only, written to): torch 2.14+ pins them itself.
    outs = {a.name for a in record.arguments.written if a.keyword_only}

    def strategy(op_schema: OpSchema) -> StrategyType:
        # DTensor inputs in the order the strategies list them: positional, then keyword.
        named = [(positional[i], arg) for i, arg in enumerate(op_schema.args_schema)] + list(op_schema.kwargs_schema.items())
        inputs = [(name, leaf) for name, arg in named for leaf in tree_leaves(arg) if isinstance(leaf, OpStrategy)]
        current = [leaf.strategies[0].output_spec.placements for _, leaf in inputs]
        checked = [i for i, (name, _) in enumerate(inputs) if name in pinned]

        def refuse(names: Collection[str] = pinned) -> RuntimeError:
            placed = ", ".join(f"{name} {tuple(current[i])}" for i, (name, _) in enumerate(inputs) if name in names) or f"{inputs[0][0]} {tuple(current[0])}"
            return RuntimeError(
                f"{record.qualname}: no sharding strategy keeps the placement of {placed}. DTensor cannot redistribute an argument the op "
                "writes to, nor a keyword-only Tensor: add a strategy that keeps that placement, or redistribute the argument before the call"
            )

        try:
            result = registered(op_schema)
        except RuntimeError as e:
            if dtensor_refused_out(e) and any(name in outs for name, _ in inputs):
                raise refuse(outs) from e
            raise
        if not isinstance(result, OpStrategy):
            return result
        kept = [
            spec
            for spec in result.strategies
            if spec.input_specs is not None
            and all(spec.input_specs[i].placements == current[i] for i in checked)
            # An in-place op returns its first argument: the output is placed like it.
            and not (record.is_inplace and current and spec.output_spec.placements != current[0])
        ]
        if not kept:
            raise refuse()
        return OpStrategy(kept)

    return strategy


def _propagator() -> Any:
    from torch.distributed.tensor import DTensor

    return DTensor._op_dispatcher.sharding_propagator


def _register(record: OpRecord, fn: Callable[..., Any]) -> None:
    """Put the strategy into DTensor's propagator (``_LOCK`` held, DTensor imported)."""
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor.experimental import register_sharding

    op = record.op
    if op is None:
        return
    register_sharding(op)(_wrap_user_fn(record, fn))
    propagator = _propagator()
    strategy = propagator.op_strategy_funcs[op]
    if _pinned(record) or record.is_inplace:
        strategy = propagator.op_strategy_funcs[op] = _keep_placements(record, strategy)
    # DTensor's cache key takes positional Tensors' specs, and other arguments only from the
    # first int on (register_sharding's guess): a decision that depends on a bool, or on a float
    # before the first int, would be reused for another value. Key every argument instead.
    table, info = record.arguments, propagator.op_to_schema_info[op]
    first_plain = next((a.index for a in table.positional if not a.holds_tensor), len(table.positional))
    propagator.op_to_schema_info[op] = RuntimeSchemaInfo(first_plain, [a.name for a in table.keyword_only] or None, info.needs_pytree)
    _REGISTERED[record] = (op, strategy)


def _import_dtensor() -> None:
    """Import DTensor's registration API; never with ``_LOCK`` held. The package first: a submodule
    alone would not wait for another thread still importing it, and would race it through torch's
    circular imports."""
    importlib.import_module(_DTENSOR)
    importlib.import_module(f"{_DTENSOR}.experimental")


def _flush() -> None:
    """Register every pending strategy: ``torch.distributed.tensor`` was just imported."""
    _import_dtensor()
    with _LOCK:
        after_import.cancel(_DTENSOR, _flush)
        for record in list(_PENDING):
            try:
                _register(record, _PENDING.pop(record))
            except Exception as e:  # one bad op must not keep the others out
                warnings.warn(f"opclass: could not register the sharding strategy of {record.where('sharding')}: {e}", RuntimeWarning, stacklevel=2)


def _install_sharding(record: OpRecord, fn: Callable[..., Any]) -> None:
    if not torch.distributed.is_available():
        return  # no DTensor in this build of torch: nothing can ever ask for the strategy
    with _LOCK:
        if _DTENSOR not in sys.modules:
            _PENDING[record] = fn
            after_import.call_after_import(_DTENSOR, _flush)
            return
    # Outside the lock: DTensor may still be importing in another thread, whose _flush needs the lock.
    _import_dtensor()
    with _LOCK:
        _register(record, fn)
    if _PENDING:  # DTensor came in without the watcher seeing it (imported by another thread meanwhile)
        _flush()


def _uninstall_sharding(record: OpRecord, fn: Callable[..., Any]) -> None:
    with _LOCK:
        _PENDING.pop(record, None)
        if not _PENDING:
            after_import.cancel(_DTENSOR, _flush)
        if record not in _REGISTERED:
            return
        op, strategy = _REGISTERED.pop(record)
        propagator = _propagator()
        if propagator.op_strategy_funcs.get(op) is strategy:
            del propagator.op_strategy_funcs[op]
            propagator.op_to_schema_info.pop(op, None)
        # Forget cached sharding decisions: they hold the ops they were made for.
        propagator.propagate_op_sharding.cache_clear()  # this thread's (the cache is thread-local)
        type(propagator)._propagate_tensor_meta_cached.cache_clear()
        getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", lambda: None)()  # native caches, where torch has them


def sharding_hook() -> Hook:
    """The ``sharding`` hook (see the module docstring and the DTensor guide page).

    Example:
        >>> import opclass
        >>> hook = opclass.hooks()["sharding"]
        >>> hook.staticmethod and not hook.kernel
        True
    """
    return Hook(
        "sharding",
        _install_sharding,
        check=_check_sharding,
        uninstall=_uninstall_sharding,
        aliases=("shard", "register_sharding"),
        doc="DTensor sharding strategies: (op args as specs) -> [(output placements, input placements), ...]",
    )
