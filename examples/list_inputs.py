"""An op that takes a list of Tensors, with a backward that returns a list of gradients.

``WeightedSum`` (``ex_list::weighted_sum``) computes ``sum(w * x for w, x in zip(weights, xs))``
with NumPy. Its schema is ``(Tensor[] xs, float[] weights) -> Tensor``; the backward returns one
gradient per positional input: a *list* for ``xs`` (one entry per tensor) and ``None`` for the
non-Tensor ``weights``.

Run it with ``python examples/list_inputs.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class WeightedSum(CustomOp, name="ex_list::weighted_sum"):
    """sum_i weights[i] * xs[i] over same-shaped tensors."""

    @staticmethod
    def cpu(xs: list[Tensor], weights: list[float]) -> Tensor:
        if len(xs) != len(weights) or not xs:
            raise ValueError(f"weighted_sum: {len(xs)} tensors but {len(weights)} weights")
        arrays = [x.numpy() for x in xs]
        total = sum(w * a for w, a in zip(weights, arrays))
        return torch.from_numpy(np.array(total, dtype=arrays[0].dtype, order="C"))

    @staticmethod
    def abstract(xs: list[Tensor], weights: list[float]) -> Tensor:
        torch._check(len(xs) == len(weights) and len(xs) > 0, lambda: "weighted_sum: need one weight per tensor")
        return torch.empty_like(xs[0], memory_format=torch.contiguous_format)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        _, weights = inputs
        ctx.weights = list(weights)

    @staticmethod
    def backward(ctx, grad):
        return [grad * w for w in ctx.weights], None


def main() -> None:
    xs = [torch.randn(3, requires_grad=True) for _ in range(3)]
    weights = [1.0, -2.0, 0.5]
    y = WeightedSum(xs, weights)
    torch.testing.assert_close(y, xs[0] - 2 * xs[1] + 0.5 * xs[2])
    y.sum().backward()
    for x, w in zip(xs, weights):
        torch.testing.assert_close(x.grad, torch.full((3,), w))
    assert WeightedSum.schema == "(Tensor[] xs, float[] weights) -> Tensor"
    print(f"{WeightedSum.qualname}{WeightedSum.schema}: grads {[x.grad[0].item() for x in xs if x.grad is not None]}")


if __name__ == "__main__":
    main()
