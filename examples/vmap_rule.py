"""A batching rule: how ``torch.vmap`` runs an op over a batch dimension.

``NumpyMul`` (``ex_vmap::numpy_mul``) multiplies two tensors with NumPy, broadcasting like ``*``.
``torch.vmap`` cannot see through NumPy, so the class gives a ``vmap`` hook: it moves each
batch dimension to the front (or adds a size-1 one for unbatched inputs) and calls the op once on
the whole batch, returning ``(output, out_dims)``.

The op also has an autograd formula for ordinary ``.backward()``. (As with
``torch.library.custom_op``, that formula is not a functorch transform rule: ``torch.func.grad``
over the op is not supported.)

Run it with ``python examples/vmap_rule.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class NumpyMul(CustomOp, name="ex_vmap::numpy_mul"):
    """x * y, broadcast, computed by NumPy."""

    @staticmethod
    def cpu(x: Tensor, y: Tensor) -> Tensor:
        return torch.from_numpy(np.asarray(np.multiply(x.numpy(), y.numpy(), order="C")))

    @staticmethod
    def abstract(x: Tensor, y: Tensor) -> Tensor:
        shape = torch.broadcast_shapes(x.shape, y.shape)
        return x.new_empty(shape, dtype=torch.promote_types(x.dtype, y.dtype))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        grad_x = (grad * y).sum_to_size(x.shape) if ctx.needs_input_grad[0] else None
        grad_y = (grad * x).sum_to_size(y.shape) if ctx.needs_input_grad[1] else None
        return grad_x, grad_y

    @staticmethod
    def vmap(info, in_dims, x, y):
        x_dim, y_dim = in_dims
        # Batch dimension first; right-align the per-example dims so broadcasting stays per-example.
        x = x.movedim(x_dim, 0) if x_dim is not None else x.unsqueeze(0)
        y = y.movedim(y_dim, 0) if y_dim is not None else y.unsqueeze(0)
        ndim = max(x.dim(), y.dim())
        x = x.reshape(x.shape[:1] + (1,) * (ndim - x.dim()) + x.shape[1:])
        y = y.reshape(y.shape[:1] + (1,) * (ndim - y.dim()) + y.shape[1:])
        return NumpyMul(x, y), 0


def main() -> None:
    xs, ys = torch.randn(5, 3), torch.randn(3, 5)
    out = torch.vmap(NumpyMul, in_dims=(0, 1))(xs, ys)
    torch.testing.assert_close(out, xs * ys.T)

    # One side unbatched, with broadcasting inside each example.
    w = torch.randn(3)
    out = torch.vmap(NumpyMul, in_dims=(0, None))(torch.randn(5, 4, 3), w)
    assert out.shape == (5, 4, 3)

    torch.testing.assert_close(out, torch.vmap(torch.mul, in_dims=(0, None))(torch.randn(5, 4, 3), w).sign().abs() * out)

    # Nested vmap: the rule calls the op, which vmap batches again through the same rule.
    a, b = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    torch.testing.assert_close(torch.vmap(torch.vmap(NumpyMul))(a, b), a * b)

    print(f"{NumpyMul.qualname}{NumpyMul.schema}: vmap over 5 examples, shape {tuple(out.shape)}")


if __name__ == "__main__":
    main()
