"""Ops with a ``sharding`` hook, and the checks one rank of a 2-process gloo group runs on them.

``define_ops(ns)`` defines the ops in namespace ``ns`` (test_sharding.py uses it for the
plain-Tensor checks too). Run as a script, ``python tests/_sharding_ops.py RANK WORLD_SIZE PORT``
is one rank: it joins the group, runs every check in ``CHECKS`` on DTensors and prints one
``RESULT {json}`` line per check (a failing check does not stop the others), then ``DONE``.

Placements are imported inside the functions: importing this module does not import
``torch.distributed.tensor`` (nor fail where ``torch.distributed`` is missing).
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import json
import sys
import traceback
from typing import Any, Callable

import torch
from torch import Tensor

import opclass
from opclass import CustomOp
from opclass.core import compat as _compat

#: Namespace of the ops the distributed checks define.
DIST_NAMESPACE = "t_sharding_dist"


@dataclasses.dataclass
class Ops:
    """The op classes, and what their kernels saw: ``(kernel, local input shape)`` per call."""

    Scale: Any
    ColumnSum: Any
    Cumsum: Any
    RowMinMax: Any
    AddInto: Any
    AddScaled: Any
    WeightedTotal: Any
    Neg_: Any
    NegOut: Any
    Provided: Any
    Placed: Any
    calls: list[tuple[str, tuple[int, ...]]]


def define_ops(ns: str) -> Ops:
    """Define the test ops in namespace ``ns``."""
    calls: list[tuple[str, tuple[int, ...]]] = []

    class Scale(CustomOp, name=f"{ns}::scale"):
        """Elementwise: factor * x. Placed like x, on dim 0 or replicated."""

        @staticmethod
        def default(x: Tensor, factor: float = 2.0) -> Tensor:
            calls.append(("scale", tuple(x.shape)))
            return x * factor

        @staticmethod
        def abstract(x: Tensor, factor: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad * ctx.factor, None

        @staticmethod
        def sharding(x, factor):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate(), None]), ([Shard(0)], [Shard(0), None])]

    class ColumnSum(CustomOp, name=f"{ns}::column_sum"):
        """x.sum(0): rows sharded give partial sums (Partial), columns sharded give sharded sums."""

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("column_sum", tuple(x.shape)))
            return x.sum(0)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x.new_empty(x.shape[1:])

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Partial, Replicate, Shard

            return [([Replicate()], [Replicate()]), ([Partial()], [Shard(0)]), ([Shard(0)], [Shard(1)])]

    class Cumsum(CustomOp, name=f"{ns}::cumsum"):
        """x.cumsum(0): needs whole columns, so rows cannot be sharded."""

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("cumsum", tuple(x.shape)))
            return x.cumsum(0)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate()]), ([Shard(1)], [Shard(1)])]

    class RowMinMax(CustomOp, name=f"{ns}::row_min_max"):
        """Two outputs: the minimum and maximum of each row."""

        @staticmethod
        def default(x: Tensor) -> tuple[Tensor, Tensor]:
            calls.append(("row_min_max", tuple(x.shape)))
            return x.amin(1), x.amax(1)

        @staticmethod
        def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
            return x.new_empty(x.shape[:1]), x.new_empty(x.shape[:1])

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate(), Replicate()], [Replicate()]), ([Shard(0), Shard(0)], [Shard(0)])]

    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("dst",)):
        """dst += src in place: dst must keep its placement."""

        @staticmethod
        def default(dst: Tensor, src: Tensor) -> None:
            calls.append(("add_into", tuple(dst.shape)))
            dst.add_(src)

        @staticmethod
        def sharding(dst, src):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([], [Replicate(), Replicate()]), ([], [Shard(0), Shard(0)])]

    class AddScaled(CustomOp, name=f"{ns}::add_scaled"):
        """x + alpha * y with a keyword-only Tensor y (DTensor never redistributes it)."""

        @staticmethod
        def default(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
            calls.append(("add_scaled", tuple(x.shape)))
            return x + alpha * y

        @staticmethod
        def abstract(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x, *, y, alpha):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate(), Replicate(), None]), ([Shard(0)], [Shard(0), Shard(0), None])]

    class WeightedTotal(CustomOp, name=f"{ns}::weighted_total"):
        """w * sum(xs): a list of Tensors takes one placement per element."""

        @staticmethod
        def default(xs: list[Tensor], w: float) -> Tensor:
            calls.append(("weighted_total", tuple(xs[0].shape)))
            return torch.stack(xs).sum(0) * w

        @staticmethod
        def abstract(xs: list[Tensor], w: float) -> Tensor:
            return torch.empty_like(xs[0])

        @staticmethod
        def sharding(xs, w):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([p], [p] * len(xs) + [None]) for p in (Replicate(), Shard(0))]

    class Provided(CustomOp, name=f"{ns}::provided"):
        """Elementwise, with a provider that takes only pieces of fewer than ROWS rows."""

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("provided:default", tuple(x.shape)))
            return x * 3

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @opclass.provider("cpu", supports=lambda x: x.shape[0] < ROWS)
        @staticmethod
        def small(x: Tensor) -> Tensor:
            calls.append(("provided:small", tuple(x.shape)))
            return x + x + x

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate()]), ([Shard(0)], [Shard(0)])]

    class Placed(CustomOp, name=f"{ns}::placed"):
        """x * factor, whose placement is the caller's choice: a bool and a float decide it."""

        @staticmethod
        def default(x: Tensor, rows: bool, factor: float) -> Tensor:
            calls.append(("placed", tuple(x.shape)))
            return x * factor

        @staticmethod
        def abstract(x: Tensor, rows: bool, factor: float) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x, rows, factor):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            p = Shard(0) if rows and factor > 0 else Replicate()
            return [([p], [p, None, None])]

    if _compat.INPLACE_TAG is None or _compat.OUT_TAG is None:  # torch 2.11/2.12: check_inplace_and_out is skipped
        return Ops(Scale, ColumnSum, Cumsum, RowMinMax, AddInto, AddScaled, WeightedTotal, None, None, Provided, Placed, calls)

    class Neg_(CustomOp, name=f"{ns}::neg_", mutates_args=("x",), tags=torch.Tag.inplace):
        """x.neg_(): in place, returns x."""

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("neg_", tuple(x.shape)))
            return x.neg_()

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate()]), ([Shard(0)], [Shard(0)])]

    class NegOut(CustomOp, name=f"{ns}::neg.out", mutates_args=("out",), tags=torch.Tag.out):
        """-x written into the keyword-only out."""

        @staticmethod
        def default(x: Tensor, *, out: Tensor) -> Tensor:
            calls.append(("neg.out", tuple(x.shape)))
            return torch.neg(x, out=out)

        @staticmethod
        def sharding(x, *, out):  # type: ignore[no-untyped-def]
            from torch.distributed.tensor import Replicate, Shard

            return [([Replicate()], [Replicate(), Replicate()]), ([Shard(0)], [Shard(0), Shard(0)])]

    return Ops(Scale, ColumnSum, Cumsum, RowMinMax, AddInto, AddScaled, WeightedTotal, Neg_, NegOut, Provided, Placed, calls)


# --------------------------------------------------------------------------- the checks one rank runs

WORLD_SIZE = 2
ROWS, COLS = 4, 6  # both divisible by the world size: even shards


def _data(seed: int) -> Tensor:
    # The same on every rank: distribute_tensor expects the full tensor everywhere.
    return torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(seed))


def _dt(x: Tensor, mesh: Any, placement: Any) -> Any:
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(x, mesh, [placement])


def _full(t: Any) -> Tensor:
    from torch.distributed.tensor import DTensor

    assert isinstance(t, DTensor), f"expected a DTensor, got {type(t).__name__}"
    full: Tensor = t.full_tensor()
    return full


def _kernel_saw(ops: Ops, name: str, shape: tuple[int, ...]) -> None:
    """The op's own kernel ran once, on a local piece of that shape (not a decomposition)."""
    assert ops.calls == [(name, shape)], f"kernel calls {ops.calls}, expected [({name!r}, {shape})]"
    ops.calls.clear()


def check_elementwise_shard0(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Shard

    x = _data(0)
    expected = ops.Scale(x, 2.5)  # the op itself, on the full Tensor
    ops.calls.clear()
    out = ops.Scale(_dt(x, mesh, Shard(0)), 2.5)
    assert out.placements == (Shard(0),), out.placements
    _kernel_saw(ops, "scale", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close(_full(out), expected)
    # A default the dispatcher leaves out still reaches the sharding function (and the kernel).
    out = ops.Scale(_dt(x, mesh, Shard(0)))
    _kernel_saw(ops, "scale", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close(_full(out), 2.0 * x)


def check_backward_on_dtensors(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import DTensor, Shard

    x = _data(9)
    dx = _dt(x, mesh, Shard(0)).requires_grad_()
    ops.Scale(dx, 3.0).sum().backward()  # the op's backward gets (and returns) DTensors
    assert isinstance(dx.grad, DTensor), type(dx.grad)
    torch.testing.assert_close(_full(dx.grad), torch.full_like(x, 3.0))
    ops.calls.clear()


def check_unlisted_placement_is_redistributed(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    x = _data(1)
    out = ops.Scale(_dt(x, mesh, Shard(1)), -1.5)  # Shard(1) is in no strategy of Scale
    assert out.placements in ((Shard(0),), (Replicate(),)), out.placements
    local = (ROWS // WORLD_SIZE, COLS) if out.placements == (Shard(0),) else (ROWS, COLS)
    _kernel_saw(ops, "scale", local)
    torch.testing.assert_close(_full(out), -1.5 * x)
    # Cumsum lists no row sharding: rows sharded are redistributed before its kernel runs.
    out = ops.Cumsum(_dt(x, mesh, Shard(0)))
    assert out.placements in ((Shard(1),), (Replicate(),)), out.placements
    local = (ROWS, COLS // WORLD_SIZE) if out.placements == (Shard(1),) else (ROWS, COLS)
    _kernel_saw(ops, "cumsum", local)
    torch.testing.assert_close(_full(out), x.cumsum(0))


def check_reduction_partial(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Partial, Shard

    x = _data(2)
    dx = _dt(x, mesh, Shard(0))
    out = ops.ColumnSum(dx)
    assert out.placements == (Partial(),), out.placements
    _kernel_saw(ops, "column_sum", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close(out.to_local(), dx.to_local().sum(0))  # this rank's rows only
    torch.testing.assert_close(_full(out), x.sum(0))  # the partial sums, reduced
    out = ops.ColumnSum(_dt(x, mesh, Shard(1)))
    assert out.placements == (Shard(0),), out.placements
    _kernel_saw(ops, "column_sum", (ROWS, COLS // WORLD_SIZE))
    torch.testing.assert_close(_full(out), x.sum(0))


def check_two_outputs(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    x = _data(3)
    lo, hi = ops.RowMinMax(_dt(x, mesh, Shard(0)))
    assert lo.placements == hi.placements == (Shard(0),), (lo.placements, hi.placements)
    _kernel_saw(ops, "row_min_max", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close((_full(lo), _full(hi)), (x.amin(1), x.amax(1)))
    lo, hi = ops.RowMinMax(_dt(x, mesh, Shard(1)))  # unlisted: redistributed first
    assert lo.placements == hi.placements and lo.placements in ((Shard(0),), (Replicate(),))
    assert len(ops.calls) == 1
    ops.calls.clear()
    torch.testing.assert_close((_full(lo), _full(hi)), (x.amin(1), x.amax(1)))


def check_tensor_list(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    xs = [_data(10), _data(11), _data(12)]
    expected = ops.WeightedTotal(xs, 0.5)
    ops.calls.clear()
    out = ops.WeightedTotal([_dt(x, mesh, Shard(0)) for x in xs], 0.5)
    assert out.placements == (Shard(0),), out.placements
    _kernel_saw(ops, "weighted_total", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close(_full(out), expected)
    # One element placed otherwise: redistributed to match the others.
    out = ops.WeightedTotal([_dt(xs[0], mesh, Shard(0)), _dt(xs[1], mesh, Replicate()), _dt(xs[2], mesh, Shard(0))], 0.5)
    assert out.placements == (Shard(0),), out.placements
    _kernel_saw(ops, "weighted_total", (ROWS // WORLD_SIZE, COLS))
    torch.testing.assert_close(_full(out), expected)


def check_mutated_argument_keeps_placement(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    x, y = _data(4), _data(5)
    for placement in (Shard(0), Replicate()):
        dst = _dt(x.clone(), mesh, placement)
        assert ops.AddInto(dst, _dt(y, mesh, Shard(0) if placement == Replicate() else Replicate())) is None
        assert dst.placements == (placement,)  # src was redistributed to match dst, not the reverse
        torch.testing.assert_close(_full(dst), x + y)
    ops.calls.clear()
    dst = _dt(x.clone(), mesh, Shard(1))
    try:
        ops.AddInto(dst, _dt(y, mesh, Shard(1)))
    except RuntimeError as e:
        assert "no sharding strategy keeps the placement of dst" in str(e), str(e)
    else:
        raise AssertionError("a mutated argument with a placement no strategy keeps must be an error")
    assert ops.calls == []
    torch.testing.assert_close(_full(dst), x)  # untouched


def check_inplace_and_out(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    x = _data(13)
    for placement in (Shard(0), Replicate()):
        dx = _dt(x.clone(), mesh, placement)
        assert ops.Neg_(dx) is dx and dx.placements == (placement,)
        torch.testing.assert_close(_full(dx), -x)
    dx = _dt(x.clone(), mesh, Shard(1))
    try:
        ops.Neg_(dx)
    except RuntimeError:
        pass  # DTensor itself refuses to move the argument of an in-place op
    else:
        raise AssertionError("an in-place op on a placement no strategy keeps must be an error")
    torch.testing.assert_close(_full(dx), x)
    for placement in (Shard(0), Replicate()):
        out = _dt(torch.zeros(ROWS, COLS), mesh, placement)
        assert ops.NegOut(_dt(x, mesh, Shard(0)), out=out) is out and out.placements == (placement,)
        torch.testing.assert_close(_full(out), -x)
    out = _dt(torch.zeros(ROWS, COLS), mesh, Shard(1))
    try:
        ops.NegOut(_dt(x, mesh, Shard(0)), out=out)
    except RuntimeError as e:
        assert "no sharding strategy keeps the placement of out" in str(e), str(e)
    else:
        raise AssertionError("an out= Tensor with a placement no strategy keeps must be an error")
    ops.calls.clear()


def check_keyword_only_tensor(ops: Ops, mesh: Any) -> None:
    from torch.distributed.tensor import Replicate, Shard

    x, y = _data(6), _data(7)
    dx = _dt(x, mesh, Shard(0))
    # Same positional placements, keyword Tensor placed differently: no stale cached decision.
    for placement, local in ((Shard(0), ROWS // WORLD_SIZE), (Replicate(), ROWS), (Shard(0), ROWS // WORLD_SIZE)):
        out = ops.AddScaled(dx, y=_dt(y, mesh, placement), alpha=3.0)
        assert out.placements == (placement,), (placement, out.placements)
        _kernel_saw(ops, "add_scaled", (local, COLS))
        torch.testing.assert_close(_full(out), x + 3.0 * y)
    try:
        ops.AddScaled(dx, y=_dt(y, mesh, Shard(1)))
    except RuntimeError as e:
        assert "no sharding strategy keeps the placement of y" in str(e), str(e)
    else:
        raise AssertionError("a keyword-only Tensor with a placement no strategy lists must be an error")
    ops.calls.clear()


def check_every_argument_keys_the_decision(ops: Ops, mesh: Any) -> None:
    """A decision that depends on a bool and a float (DTensor's own key has neither) is made anew
    for each of their values, not reused from the first call."""
    from torch.distributed.tensor import Replicate, Shard

    x = _data(8)
    dx = _dt(x, mesh, Shard(0))
    for rows, factor, placement in ((True, 2.0, Shard(0)), (False, 2.0, Replicate()), (True, -2.0, Replicate()), (True, 3.0, Shard(0))):
        out = ops.Placed(dx, rows, factor)
        assert out.placements == (placement,), (rows, factor, out.placements)
        _kernel_saw(ops, "placed", (ROWS // WORLD_SIZE if placement == Shard(0) else ROWS, COLS))
        torch.testing.assert_close(_full(out), x * factor)


def check_providers_on_local_shards(ops: Ops, mesh: Any) -> None:
    """DTensor runs the op on each local shard, and each such call makes its own choice."""
    from torch.distributed.tensor import Replicate, Shard

    x = _data(8)
    out = ops.Provided(_dt(x, mesh, Shard(0)))
    _kernel_saw(ops, "provided:small", (ROWS // WORLD_SIZE, COLS))  # a shard: the provider takes it
    torch.testing.assert_close(_full(out), 3 * x)
    out = ops.Provided(_dt(x, mesh, Replicate()))
    _kernel_saw(ops, "provided:default", (ROWS, COLS))  # every row: the provider declines
    torch.testing.assert_close(_full(out), 3 * x)


def check_redefinition_and_removal(ops: Ops, mesh: Any) -> None:
    """Runs last: redefines Scale (only Replicate now), then removes it."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    propagator = DTensor._op_dispatcher.sharding_propagator
    x = _data(8)
    ops.Scale(_dt(x, mesh, Shard(0)), 3.0)  # fills the sharding caches with the old op
    old = ops.Scale.op
    assert old in propagator.op_strategy_funcs and old in propagator.op_to_schema_info
    old_strategy = propagator.op_strategy_funcs[old]

    class Scale(CustomOp, name=ops.Scale.qualname):
        @staticmethod
        def default(x: Tensor, factor: float = 2.0) -> Tensor:
            ops.calls.append(("scale v2", tuple(x.shape)))
            return x * factor

        @staticmethod
        def abstract(x: Tensor, factor: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x, factor):  # type: ignore[no-untyped-def]
            return [([Replicate()], [Replicate(), None])]

    # The same registrations: installed in place (the same OpOverload), its strategy replaced.
    assert Scale.op is old and propagator.op_strategy_funcs[old] is not old_strategy
    assert propagator.propagate_op_sharding.cache_info().currsize == 0
    ops.calls.clear()
    out = Scale(_dt(x, mesh, Shard(0)), 3.0)
    assert out.placements == (Replicate(),), out.placements  # the new strategy, not a cached one
    assert ops.calls == [("scale v2", (ROWS, COLS))], ops.calls
    torch.testing.assert_close(_full(out), 3.0 * x)
    new = Scale.op
    opclass.remove(Scale)
    assert new not in propagator.op_strategy_funcs and new not in propagator.op_to_schema_info
    assert not [op for op in propagator.op_strategy_funcs if str(op).startswith(f"{DIST_NAMESPACE}.scale.")]


#: The tags a check's ops need (a torch without them skips the check and does not define them).
CHECK_TAGS: dict[str, tuple[str, ...]] = {"inplace_and_out": ("inplace", "out")}

#: Run in this order; the last one redefines and removes Scale.
CHECKS: dict[str, Callable[[Ops, Any], None]] = {
    "elementwise_shard0": check_elementwise_shard0,
    "backward_on_dtensors": check_backward_on_dtensors,
    "unlisted_placement_is_redistributed": check_unlisted_placement_is_redistributed,
    "reduction_partial": check_reduction_partial,
    "two_outputs": check_two_outputs,
    "tensor_list": check_tensor_list,
    "mutated_argument_keeps_placement": check_mutated_argument_keeps_placement,
    "inplace_and_out": check_inplace_and_out,
    "keyword_only_tensor": check_keyword_only_tensor,
    "providers_on_local_shards": check_providers_on_local_shards,
    "every_argument_keys_the_decision": check_every_argument_keys_the_decision,
    "redefinition_and_removal": check_redefinition_and_removal,
}


def main(rank: int, world_size: int, port: int) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60)
    )
    try:
        mesh = init_device_mesh("cpu", (world_size,))
        ops = define_ops(DIST_NAMESPACE)
        for name, check in CHECKS.items():
            if name in CHECK_TAGS and ops.Neg_ is None:
                continue
            ops.calls.clear()
            try:
                check(ops, mesh)
                result = {"check": name, "ok": True}
            except Exception:
                result = {"check": name, "ok": False, "error": traceback.format_exc()}
            print("RESULT " + json.dumps(result), flush=True)
        opclass.remove_namespace(DIST_NAMESPACE)
        # Tear down cleanly: without these two, torch 2.13 now and then aborts the process at exit
        # ("terminate called without an active exception"), also when only aten ops ran on DTensors.
        del ops
        gc.collect()  # DTensors left in reference cycles, freed while the group still exists
        dist.barrier()  # both ranks done communicating before either destroys the group
    finally:
        dist.destroy_process_group()
    print("DONE", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
