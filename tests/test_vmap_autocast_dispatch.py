"""The hooks that give a transform or a mode a rule of the op's own: ``vmap`` (a batching rule: one
kernel call per batch), ``autocast`` (the dtype per device type) and ``torch_dispatch`` (a rule per
TorchDispatchMode class)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from opclass import CustomOp, OpDefinitionError


# --------------------------------------------------------------------------- vmap


def _row_sum(ns: str, kernel_shapes: list[tuple[int, ...]], rule_calls: list[Any] | None) -> Any:
    """A NumPy row sum; with a ``vmap`` hook when ``rule_calls`` is given."""

    class RowSum(CustomOp, name=f"{ns}::row_sum"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            kernel_shapes.append(tuple(x.shape))
            return torch.from_numpy(x.numpy().sum(axis=-1).copy())

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x.new_empty(x.shape[:-1])

    if rule_calls is None:
        return RowSum

    class BatchedRowSum(RowSum):
        @staticmethod
        def vmap(info, in_dims, x):
            rule_calls.append((info.batch_size, in_dims))
            (x_dim,) = in_dims
            return BatchedRowSum(x.movedim(x_dim, 0)), 0

    return BatchedRowSum


def test_vmap_hook_is_used_by_torch_vmap(ns: str) -> None:
    kernel_shapes: list[tuple[int, ...]] = []
    rule_calls: list[Any] = []
    RowSum = _row_sum(ns, kernel_shapes, rule_calls)
    xs = torch.randn(3, 5, 4)
    out = torch.vmap(RowSum, in_dims=1)(xs)
    assert rule_calls == [(5, (1,))]
    assert kernel_shapes == [(5, 3, 4)]  # one call on the whole batch, batch dim moved first
    torch.testing.assert_close(out, xs.sum(-1).T)


def test_vmap_without_hook_falls_back_per_example(ns: str) -> None:
    """Control for the test above: without the hook, vmap runs the kernel once per example."""
    kernel_shapes: list[tuple[int, ...]] = []
    RowSum = _row_sum(ns, kernel_shapes, None)
    xs = torch.randn(3, 5, 4)
    out = torch.vmap(RowSum, in_dims=1)(xs)
    assert kernel_shapes == [(3, 4)] * 5
    torch.testing.assert_close(out, xs.sum(-1).T)


def test_a_vmap_rule_takes_keyword_only_arguments_by_keyword_as_the_hint_says(ns: str) -> None:
    # What the hint used to suggest (no k), which failed at the first vmap call.
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def cpu(x: Tensor, *, k: float) -> Tensor:
                return x * k

            @staticmethod
            def vmap(info: Any, in_dims: Any, x: Tensor) -> Any:
                return x, 0

    assert str(info.value).endswith(
        "takes no 'k' by keyword, which torch.vmap passes the rule by keyword; write vmap(info, in_dims, x, *, k) returning (output, out_dims)"
    ), str(info.value)
    with pytest.raises(OpDefinitionError, match=r"takes 2 positional parameters; write vmap\(info, in_dims, x, \*, k\) returning"):

        class Short(CustomOp, name=f"{ns}::short"):
            @staticmethod
            def cpu(x: Tensor, *, k: float) -> Tensor:
                return x * k

            @staticmethod
            def vmap(info: Any, in_dims: Any) -> Any:
                return None, 0

    class Good(CustomOp, name=f"{ns}::good"):  # the form the hints give
        @staticmethod
        def cpu(x: Tensor, *, k: float) -> Tensor:
            return x * k

        @staticmethod
        def vmap(info: Any, in_dims: Any, x: Tensor, *, k: float) -> Any:
            return Good(x.movedim(in_dims[0], 0), k=k), 0

    xs = torch.randn(3, 4)
    torch.testing.assert_close(torch.vmap(lambda t: Good(t, k=2.0))(xs), xs * 2)


# --------------------------------------------------------------------------- autocast


def test_autocast_casts_positional_and_keyword_tensors(ns: str) -> None:
    seen: list[tuple[torch.dtype, ...]] = []

    class Mix(CustomOp, name=f"{ns}::mix"):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def cpu(x: Tensor, idx: Tensor, d: Tensor, *, w: Tensor) -> Tensor:
            seen.append((x.dtype, idx.dtype, d.dtype, w.dtype))
            return x * w

    x, idx, d, w = torch.ones(2), torch.arange(2), torch.ones(2, dtype=torch.float64), torch.ones(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = Mix(x, idx, d, w=w)
    # float32 tensors cast (positional and keyword-only); ints and float64 left alone.
    assert seen[-1] == (torch.bfloat16, torch.int64, torch.float64, torch.bfloat16)
    assert y.dtype is torch.bfloat16
    y = Mix(x, idx, d, w=w)
    assert seen[-1] == (torch.float32, torch.int64, torch.float64, torch.float32)
    assert y.dtype is torch.float32


def test_autocast_leaves_a_written_argument_uncast_so_the_write_reaches_the_caller(ns: str) -> None:
    seen: list[tuple[torch.dtype, torch.dtype]] = []

    class Accumulate(CustomOp, name=f"{ns}::accumulate", mutates_args=("acc",)):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def cpu(acc: Tensor, x: Tensor) -> None:
            seen.append((acc.dtype, x.dtype))
            acc.add_(x)

        @staticmethod
        def abstract(acc: Tensor, x: Tensor) -> None:
            return None

    calls = {
        "class call": lambda a, x: Accumulate(a, x),
        "torch.ops": lambda a, x: Accumulate.op(a, x),
        "compiled": torch.compile(lambda a, x: Accumulate(a, x), backend="aot_eager", fullgraph=True),
    }
    for label, call in calls.items():
        acc, x = torch.zeros(3), torch.full((3,), 1.5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            call(acc, x)
            call(acc, x)
        assert acc.dtype is torch.float32, label
        assert torch.equal(acc, torch.full((3,), 3.0)), (label, acc)  # both writes reached the caller
        assert seen[-1] == (torch.float32, torch.bfloat16), label  # the other argument is still cast


# --------------------------------------------------------------------------- torch_dispatch


def test_torch_dispatch_rule_used_under_mode(ns: str) -> None:
    rule_calls: list[Any] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class OtherMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def rule(mode, func, types, args, kwargs):
        rule_calls.append((type(mode), func))
        return args[0] * 100

    class Inc(CustomOp, name=f"{ns}::inc"):
        torch_dispatch = {Recorder: rule}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    x = torch.ones(2)
    with Recorder():
        y = Inc(x)
    torch.testing.assert_close(y, torch.full((2,), 100.0))
    assert rule_calls == [(Recorder, Inc.op)]
    # Outside the mode, and under another mode, the kernel runs.
    torch.testing.assert_close(Inc(x), torch.full((2,), 2.0))
    with OtherMode():
        torch.testing.assert_close(Inc(x), torch.full((2,), 2.0))
    assert len(rule_calls) == 1
