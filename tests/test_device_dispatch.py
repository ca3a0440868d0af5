"""Which kernel serves a call, by device: a device kernel over ``default``, ``default`` alone on every
device, no kernel where the op has none, and factory ops (no Tensor argument) dispatched on their
``device`` argument."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from opclass import CustomOp


# --------------------------------------------------------------------------- device kernels and default


def test_cpu_kernel_wins_over_default_on_cpu(ns: str) -> None:
    calls: list[tuple[str, str]] = []

    class Both(CustomOp, name=f"{ns}::both"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("default", x.device.type))
            return x + 1

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            calls.append(("cpu", x.device.type))
            return x + 2

    torch.testing.assert_close(Both(torch.zeros(2)), torch.full((2,), 2.0))
    assert calls == [("cpu", "cpu")]


def test_only_default_runs_on_cpu(ns: str) -> None:
    calls: list[str] = []

    class OnlyDefault(CustomOp, name=f"{ns}::only_default"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(x.device.type)
            return x + 1

    torch.testing.assert_close(OnlyDefault(torch.zeros(2)), torch.ones(2))
    torch.testing.assert_close(getattr(torch.ops, ns).only_default(torch.zeros(2)), torch.ones(2))
    assert calls == ["cpu", "cpu"]


def test_cpu_only_op_has_no_kernel_for_other_devices(ns: str) -> None:
    class CpuOnly(CustomOp, name=f"{ns}::cpu_only"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    assert torch._C._dispatch_has_kernel_for_dispatch_key(CpuOnly.qualname, "CPU")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(CpuOnly.qualname, "CUDA")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(CpuOnly.qualname, "CompositeExplicitAutograd")


def test_a_cuda_only_op_has_a_stand_in_on_cpu_that_says_what_it_has(ns: str) -> None:
    class CudaOnly(CustomOp, name=f"{ns}::cuda_only"):
        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x + 1

    # At CPU, opclass's stand-in: it raises what the dispatcher raises there, saying what the op has.
    assert torch._C._dispatch_has_kernel_for_dispatch_key(CudaOnly.qualname, "CPU")
    with pytest.raises(NotImplementedError, match=r"::cuda_only \(CudaOnly\) has no kernel for cpu tensors \(it has CudaOnly.cuda\): define CudaOnly.cpu, or CudaOnly.default"):
        CudaOnly.op(torch.ones(1))
    assert repr(CudaOnly.record).endswith("fast path: cuda>")


# --------------------------------------------------------------------------- factory ops


def _eye(ns: str, calls: list[str]) -> Any:
    class Eye(CustomOp, name=f"{ns}::eye"):
        @staticmethod
        def cpu(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
            calls.append("cpu")
            return torch.eye(n, dtype=dtype)

        @staticmethod
        def abstract(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
            calls.append("abstract")
            return torch.empty(n, n, dtype=dtype, device=device)

    return Eye


def test_factory_op_dispatches_on_device_cpu(ns: str) -> None:
    calls: list[str] = []
    Eye = _eye(ns, calls)
    y = Eye(3, torch.float64, torch.device("cpu"))
    assert calls == ["cpu"]
    torch.testing.assert_close(y, torch.eye(3, dtype=torch.float64))
    # A device given as a string works too.
    Eye(2, torch.float32, "cpu")
    assert calls == ["cpu", "cpu"]


def test_factory_op_dispatches_on_device_meta(ns: str) -> None:
    calls: list[str] = []
    Eye = _eye(ns, calls)
    y = Eye(4, torch.float16, torch.device("meta"))
    assert calls == ["abstract"]
    assert y.is_meta and y.shape == (4, 4) and y.dtype is torch.float16


def test_factory_op_with_keyword_only_device(ns: str) -> None:
    calls: list[str] = []

    class Full(CustomOp, name=f"{ns}::full"):
        @staticmethod
        def cpu(n: int, value: float, *, device: torch.device = torch.device("cpu")) -> Tensor:
            calls.append("cpu")
            return torch.full((n,), value)

        @staticmethod
        def abstract(n: int, value: float, *, device: torch.device = torch.device("cpu")) -> Tensor:
            calls.append("abstract")
            return torch.empty(n, device=device)

    torch.testing.assert_close(Full(2, 3.0), torch.full((2,), 3.0))
    assert Full(2, 3.0, device="meta").is_meta
    assert calls == ["cpu", "abstract"]
