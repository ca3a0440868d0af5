"""Ops the other case files import: type checkers must follow them across modules."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

import opclass
from opclass import CustomOp


class Scale(CustomOp, name="typing_cases::scale"):
    @staticmethod
    def cpu(x: Tensor, factor: float = 2.0, *, bias: Optional[Tensor] = None) -> Tensor:
        return x * factor if bias is None else x * factor + bias


class MinMax(CustomOp, name="typing_cases::min_max"):
    @staticmethod
    def default(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.min(), x.max()


class WeightedSum(CustomOp, name="typing_cases::weighted_sum"):
    @staticmethod
    def default(xs: list[Tensor], weights: list[float]) -> Tensor:
        out = torch.zeros_like(xs[0])
        for x, w in zip(xs, weights):
            out = out + x * w
        return out


class AddInto(CustomOp, name="typing_cases::add_into", mutates_args=("out",)):
    @staticmethod
    def default(out: Tensor, x: Tensor) -> None:
        out.add_(x)


# Ops defined outside opclass (as a C++ library would), which the classes below extend.
_foreign = torch.library.Library("typing_cases", "FRAGMENT")  # type: ignore[no-untyped-call]
_foreign.define("foreign_double(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
_foreign.define("foreign_neg(Tensor x) -> Tensor")  # type: ignore[no-untyped-call]
_foreign.impl("foreign_neg", lambda x: -x, "CPU")  # type: ignore[no-untyped-call]


class ForeignDouble(CustomOp, name="typing_cases::foreign_double", existing=True):
    @staticmethod
    def default(x: Tensor) -> Tensor:
        return x * 2


class ForeignNeg(CustomOp, name="typing_cases::foreign_neg", existing=True):
    """Only a fake kernel: the op's own CPU kernel computes."""

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)


class SinBase(CustomOp, namespace="typing_cases"):
    """An abstract op base: a fake kernel, no real one."""

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)


class NoKernelBase(CustomOp, namespace="typing_cases"):
    """An abstract op base with no hook at all."""


class ShardingOnlyBase(CustomOp, namespace="typing_cases"):
    """An abstract op base: ``sharding`` is a hook, not a kernel."""

    @staticmethod
    def sharding(x: Tensor) -> list[tuple[list[None], list[None]]]:
        return []


class SinCpu(SinBase, name="sin_cpu"):
    @staticmethod
    def cpu(x):  # type: ignore[no-untyped-def]
        return x.sin()


class ScaleVariant(Scale, name="typing_cases::scale_variant"):
    """A variant: inherits Scale's kernel and signature."""


class FromSchema(CustomOp, name="typing_cases::from_schema", schema="(Tensor x, int[] dims, *, bool keep=False) -> (Tensor, Tensor)"):
    @staticmethod
    def cpu(x, dims, *, keep=False):  # type: ignore[no-untyped-def]
        return x.sum(dims, keep), x.amax(dims, keep)


class Quantize(CustomOp, name="typing_cases::quantize"):
    """Plain-int arguments (schema ``int``): type checkers read ``opclass.Int`` as ``int``."""

    @staticmethod
    def cpu(x: Tensor, quant_min: opclass.Int, quant_max: opclass.Int, dims: list[opclass.Int]) -> Tensor:
        return x.clamp(quant_min, quant_max).sum(dims)


class Silu(CustomOp, name="typing_cases::silu"):
    """A composite op: typed from its body like any kernel."""

    @staticmethod
    def composite(x: Tensor, k: float) -> Tensor:
        return torch.nn.functional.silu(x) * k


class Provided(CustomOp, name="typing_cases::provided"):
    """An op with a provider: typed from its kernels, the provider one of them."""

    @staticmethod
    def default(x: Tensor, k: float = 1.0) -> Tensor:
        return x * k

    @opclass.provider("cpu", supports=lambda x, k: x.is_contiguous())
    @staticmethod
    def fast(x: Tensor, k: float = 1.0) -> Tensor:
        return x * k


class Norm(CustomOp, name="typing_cases::norm", out=True, inplace=("x",)):
    """An out-style kernel: type checkers take the signature from abstract, the functional one."""

    @staticmethod
    @opclass.style("out")
    def cpu(x: Tensor, eps: float, *, out: Tensor) -> None:
        torch.mul(x, eps, out=out)

    @staticmethod
    def abstract(x: Tensor, eps: float) -> Tensor:
        return torch.empty_like(x)
