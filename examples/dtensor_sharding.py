"""Ops on DTensors: the ``sharding`` hook gives DTensor each op's sharding strategies.

``Scale`` (``ex_dtensor::scale``) multiplies by a float, elementwise: its output is placed like
its input, rows sharded (``Shard(0)``) or replicated. ``ColumnSum`` (``ex_dtensor::column_sum``)
sums over the rows: with the rows sharded, each rank sums its own rows and the result is
``Partial()`` (the per-rank sums still to be added up); with the columns sharded it is sharded.

``main()`` starts 2 processes (the gloo backend on localhost, CPU); each puts a Tensor on a 1-D
mesh of both ranks, calls the ops on DTensors (each rank's kernel computes its local shard), and
checks the results against the same ops on the whole Tensor.

Run it with ``python examples/dtensor_sharding.py``.
"""

from __future__ import annotations

import datetime
import gc
import socket

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.multiprocessing.spawn import spawn

from opclass import CustomOp


class Scale(CustomOp, name="ex_dtensor::scale"):
    """factor * x."""

    @staticmethod
    def default(x: Tensor, factor: float) -> Tensor:
        return x * factor

    @staticmethod
    def abstract(x: Tensor, factor: float) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def sharding(x, factor):
        # (output placements, input placements): one input placement per argument, None for factor.
        return [
            ([Replicate()], [Replicate(), None]),
            ([Shard(0)], [Shard(0), None]),
        ]


class ColumnSum(CustomOp, name="ex_dtensor::column_sum"):
    """x.sum(0) of a 2-D Tensor."""

    @staticmethod
    def default(x: Tensor) -> Tensor:
        return x.sum(0)

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return x.new_empty(x.shape[1:])

    @staticmethod
    def sharding(x):
        return [
            ([Replicate()], [Replicate()]),
            ([Partial()], [Shard(0)]),  # rows sharded: each rank sums its rows
            ([Shard(0)], [Shard(1)]),  # columns sharded: each rank sums its columns
        ]


def run(rank: int, world_size: int) -> None:
    """One rank: the ops on DTensors, checked against the ops on the whole Tensor."""
    mesh = init_device_mesh("cpu", (world_size,))
    x = torch.arange(24.0).reshape(4, 6)  # the same on every rank
    rows = distribute_tensor(x, mesh, [Shard(0)])

    y = Scale(rows, 0.5)
    assert isinstance(y, DTensor) and y.placements == (Shard(0),)
    assert y.to_local().shape == (2, 6)  # this rank's kernel scaled its own two rows
    torch.testing.assert_close(y.full_tensor(), Scale(x, 0.5))

    total = ColumnSum(rows)
    assert isinstance(total, DTensor) and total.placements == (Partial(),)
    torch.testing.assert_close(total.to_local(), rows.to_local().sum(0))  # this rank's rows only
    torch.testing.assert_close(total.full_tensor(), ColumnSum(x))  # full_tensor() adds them up

    columns = distribute_tensor(x, mesh, [Shard(1)])
    by_column = ColumnSum(columns)
    assert isinstance(by_column, DTensor) and by_column.placements == (Shard(0),)
    # Scale lists no column sharding: DTensor redistributes the input, then runs the kernel.
    z = Scale(columns, 2.0)
    assert isinstance(z, DTensor) and z.placements in ((Shard(0),), (Replicate(),))
    torch.testing.assert_close(z.full_tensor(), Scale(x, 2.0))

    sums = total.full_tensor()  # a collective: every rank takes part
    if rank == 0:
        print(f"{Scale.qualname}: {rows.placements} -> {y.placements}; {ColumnSum.qualname}: {rows.placements} -> {total.placements}")
        print(f"column sums on {world_size} ranks: {sums.tolist()}")


def worker(rank: int, world_size: int, port: int) -> None:
    """One process of the group: join it, run, leave."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60)
    )
    try:
        run(rank, world_size)
        # Tear down cleanly (torch 2.13 otherwise now and then aborts at exit): free the run's
        # DTensors, then wait until every rank is done communicating.
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main() -> None:
    if not dist.is_gloo_available():
        print("this example needs torch.distributed with the gloo backend")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spawn(worker, args=(2, port), nprocs=2)
    print("2 processes: ok")


if __name__ == "__main__":
    main()
