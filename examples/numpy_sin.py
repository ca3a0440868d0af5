"""A custom op whose kernel runs NumPy code, with an autograd formula: the README's op, as a script.

``NumpySin`` becomes the operator ``ex_numpy::numpy_sin`` (``examples/quickstart.py`` checks it).
PyTorch cannot look inside NumPy, so the class gives everything the op needs to work with the rest
of PyTorch:

* ``cpu``: the kernel, called on CPU tensors;
* ``abstract``: the fake kernel (output shape/dtype only) used by torch.compile and torch.export;
* ``setup_context`` + ``backward``: the derivative, d/dx sin(x) = cos(x).

Run it with ``python examples/numpy_sin.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class NumpySin(CustomOp, name="ex_numpy::numpy_sin"):
    """sin(x), computed by NumPy."""

    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        # np.asarray: NumPy returns a scalar, not an array, for 0-dim input.
        return torch.from_numpy(np.asarray(np.sin(x.numpy())))

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


def main() -> None:
    x = torch.linspace(-3, 3, 7, requires_grad=True)
    y = NumpySin(x)
    torch.testing.assert_close(y, torch.sin(x))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))

    # The same op, reached through torch.ops, and its schema.
    assert NumpySin.op is torch.ops.ex_numpy.numpy_sin.default
    assert NumpySin.schema == "(Tensor x) -> Tensor"
    torch.testing.assert_close(torch.ops.ex_numpy.numpy_sin(x.detach()), torch.sin(x.detach()))

    # torch.compile sees one opaque op node; the abstract kernel gives it the output metadata.
    compiled = torch.compile(lambda t: NumpySin(t) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x.detach()), 2 * torch.sin(x.detach()))

    print(f"{NumpySin.qualname}{NumpySin.schema}: sin and its gradient match torch.sin/torch.cos")


if __name__ == "__main__":
    main()
