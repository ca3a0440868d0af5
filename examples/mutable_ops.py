"""Ops that write into their arguments: ``mutates_args``, ``Tag.inplace`` and ``Tag.out``.

Three flavours of mutation, under the namespace ``ex_mutable``:

* ``AddInto``: ``mutates_args=("dst",)``; writes ``dst += src`` and returns nothing. Ops that
  return nothing get a generated fake kernel, so no ``abstract`` is needed.
* ``Sin_`` (``ex_mutable::sin_``): ``Tag.inplace``; mutates its first argument and returns it,
  like ``torch.Tensor.sin_``.
* ``SinOut`` (``ex_mutable::sin.out``): ``Tag.out``; writes into the keyword-only ``out`` and
  returns it, like ``torch.sin(x, out=...)``.

Autograd records that the mutated tensors changed (their version counter goes up), and
torch.compile/torch.export functionalize the mutations.

Run it with ``python examples/mutable_ops.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class AddInto(CustomOp, name="ex_mutable::add_into", mutates_args=("dst",)):
    """dst += src, in place; returns nothing."""

    @staticmethod
    def cpu(dst: Tensor, src: Tensor) -> None:
        np.add(dst.numpy(), src.numpy(), out=dst.numpy())


class Sin_(CustomOp, name="ex_mutable::sin_", mutates_args=("x",), tags=torch.Tag.inplace):
    """x.sin_(): mutates x and returns it."""

    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        np.sin(x.numpy(), out=x.numpy())
        return x


class SinOut(CustomOp, name="ex_mutable::sin.out", mutates_args=("out",), tags=torch.Tag.out):
    """sin(x) written into out; returns out."""

    @staticmethod
    def cpu(x: Tensor, *, out: Tensor) -> Tensor:
        np.sin(x.numpy(), out=out.numpy())
        return out


def main() -> None:
    dst, src = torch.zeros(4), torch.arange(4.0)
    version = dst._version
    assert AddInto(dst, src) is None
    torch.testing.assert_close(dst, torch.arange(4.0))
    assert dst._version > version, "autograd must see that dst changed"

    x = torch.linspace(-1, 1, 5)
    expected = torch.sin(x)
    assert Sin_(x) is x
    torch.testing.assert_close(x, expected)

    x = torch.linspace(-1, 1, 5)
    out = torch.empty(5)
    assert SinOut(x, out=out) is out
    torch.testing.assert_close(out, torch.sin(x))

    # Under torch.compile the mutations are functionalized and written back.
    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(dst: Tensor, src: Tensor) -> Tensor:
        AddInto(dst, src)
        return Sin_(dst * 1)

    dst = torch.zeros(3)
    torch.testing.assert_close(step(dst, torch.ones(3)), torch.sin(torch.ones(3)))
    torch.testing.assert_close(dst, torch.ones(3))

    print(f"{AddInto.qualname}{AddInto.schema}\n{Sin_.qualname}{Sin_.schema}\n{SinOut.qualname}{SinOut.schema}")


if __name__ == "__main__":
    main()
