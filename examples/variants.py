"""Op families: an abstract base with the shared parts, concrete variants with their own kernels.

``Softplus`` declares ``namespace="ex_variants"`` and defines the fake kernel and the autograd
formula (d/dx softplus(x) = sigmoid(x)), but no kernel: it is an abstract base and registers
nothing. Each subclass adds a ``cpu`` kernel and becomes its own op, named from the class name:

* ``SoftplusNumpy`` -> ``ex_variants::softplus_numpy`` (NumPy's ``logaddexp``);
* ``SoftplusTorch`` -> ``ex_variants::softplus_torch`` (``torch.nn.functional.softplus``).

Run it with ``python examples/variants.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class Softplus(CustomOp, namespace="ex_variants"):
    """log(1 + exp(x)); subclasses give the kernel."""

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
        return grad * torch.sigmoid(x)


class SoftplusNumpy(Softplus):
    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        return torch.from_numpy(np.asarray(np.logaddexp(0, x.numpy()), dtype=x.numpy().dtype))


class SoftplusTorch(Softplus):
    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        return torch.nn.functional.softplus(x)


def main() -> None:
    try:
        Softplus(torch.zeros(1))  # type: ignore[misc]  # the opclass.mypy plugin flags it too
    except TypeError:
        pass
    else:
        raise AssertionError("the abstract base must not be callable")

    x = torch.linspace(-4, 4, 9, requires_grad=True)
    expected = torch.nn.functional.softplus(x.detach())
    for variant in (SoftplusNumpy, SoftplusTorch):
        x.grad = None
        y = variant(x)
        torch.testing.assert_close(y, expected)
        y.sum().backward()
        torch.testing.assert_close(x.grad, torch.sigmoid(x.detach()))
    assert SoftplusNumpy.qualname == "ex_variants::softplus_numpy"
    assert SoftplusTorch.qualname == "ex_variants::softplus_torch"
    print(f"{SoftplusNumpy.qualname} and {SoftplusTorch.qualname} share {Softplus.__name__}'s abstract and backward")


if __name__ == "__main__":
    main()
