"""Testing an op with its ``samples`` hook and ``opclass.testing.check_op``.

``ScaledTanh`` (``ex_testing::scaled_tanh``) computes ``scale * tanh(x)`` with an autograd formula
and a fake kernel. Its ``samples()`` static method lists representative inputs: a vector that
requires grad, a non-contiguous matrix, a 0-dim Tensor, and a keyword argument.
``check_op(ScaledTanh)`` runs, on each sample, ``torch.library.opcheck``, ``gradcheck`` (the op
has a backward), and the check that ``ScaledTanh(...)`` (the eager fast path) and
``ScaledTanh.op(...)`` (the dispatcher) agree. A broken variant shows what a failure reads like.

In a pytest suite, ``@opclass.testing.parametrize_samples(ScaledTanh)`` on a
``test_op(op, sample)`` that calls ``opclass.testing.check_sample(op, sample)`` makes one test case
per sample.

Run it with ``python examples/testing_ops.py``.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp
from opclass.testing import Sample


class ScaledTanh(CustomOp, name="ex_testing::scaled_tanh"):
    """scale * tanh(x)."""

    @staticmethod
    def default(x: Tensor, scale: float = 1.0) -> Tensor:
        return scale * torch.tanh(x)

    @staticmethod
    def abstract(x: Tensor, scale: float = 1.0) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        return grad * ctx.scale * (1 - torch.tanh(x) ** 2), None

    @staticmethod
    def samples() -> Iterator[Sample | tuple[Tensor, float]]:
        yield Sample((torch.randn(5, requires_grad=True),), name="vector")
        yield Sample((torch.randn(4, 3).t(), 2.0), name="transposed")
        yield Sample((torch.randn(()),), {"scale": -0.5}, name="scalar_keyword")
        yield (torch.randn(2, 2), 3.0)


def main() -> None:
    opclass.testing.check_op(ScaledTanh)
    names = [s.name if isinstance(s, Sample) else "(tuple)" for s in ScaledTanh.samples()]
    print(f"{ScaledTanh.qualname}{ScaledTanh.schema}: opcheck, gradcheck, fast path ok on {names}")

    class WrongGrad(ScaledTanh, name="ex_testing::wrong_grad"):
        """A variant whose backward forgets the scale."""

        @staticmethod
        def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
            (x,) = ctx.saved_tensors
            return grad * (1 - torch.tanh(x) ** 2), None

    try:
        opclass.testing.check_op(WrongGrad, [Sample((torch.randn(3), 2.0), name="scaled")], opcheck=False)
    except AssertionError as e:
        print("caught:", str(e).splitlines()[0][:90])
    else:
        raise AssertionError("the wrong backward went unnoticed")
    finally:
        opclass.remove(WrongGrad)


if __name__ == "__main__":
    main()
