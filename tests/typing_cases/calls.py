"""Correct calls: no diagnostics, and each result has the kernel's return type. Also run as a script."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from typing_extensions import reveal_type

import opclass
from ops import AddInto, ForeignDouble, ForeignNeg, FromSchema, MinMax, Norm, Provided, Quantize, Scale, ScaleVariant, Silu, SinCpu, WeightedSum

x = torch.ones(3)

# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Scale(x)" is "Tensor"
reveal_type(Scale(x))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Scale(x, 3, bias=x)" is "Tensor"
reveal_type(Scale(x, 3, bias=x))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Scale(x=x, factor=0.5, bias=None)" is "Tensor"
reveal_type(Scale(x=x, factor=0.5, bias=None))
# M: note: Revealed type is "tuple[torch._tensor.Tensor, torch._tensor.Tensor]"
# P: information: Type of "MinMax(x)" is "tuple[Tensor, Tensor]"
reveal_type(MinMax(x))
lo, hi = MinMax(x)
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "WeightedSum([x, x], [0.5, 2])" is "Tensor"
reveal_type(WeightedSum([x, x], [0.5, 2]))
# M: note: Revealed type is "None"
# P: information: Type of "AddInto(x, x)" is "None"
reveal_type(AddInto(x, x))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "ScaleVariant(x, 1.5)" is "Tensor"
reveal_type(ScaleVariant(x, 1.5))
# existing=True: an op defined elsewhere, typed from the class's kernel.
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "ForeignDouble(x)" is "Tensor"
reveal_type(ForeignDouble(x))
# Typed from abstract, its only annotated hook (the real kernel is the existing op's).
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "ForeignNeg(x)" is "Tensor"
reveal_type(ForeignNeg(x))

# The signature from schema= (mypy plugin only; pyright infers from the unannotated kernel).
# M: note: Revealed type is "tuple[torch._tensor.Tensor, torch._tensor.Tensor]"
# P: information: Type of "FromSchema(x, [0], keep=True)" is "tuple[Unknown, Unknown]"
reveal_type(FromSchema(x, [0], keep=True))

# A kernel with no annotations under an annotated abstract: mypy takes the abstract's
# signature (the runtime's rule); pyright sees the unannotated cpu kernel.
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "SinCpu(x)" is "Any"
reveal_type(SinCpu(x))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Quantize(x, 0, 255, [0])" is "Tensor"
reveal_type(Quantize(x, 0, 255, [0]))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Silu(x, 2)" is "Tensor"
reveal_type(Silu(x, 2.0))

# An op class is a callable with the op's signature.
unary: Callable[[Tensor], Tensor] = Scale
binary: Callable[[Tensor, float], Tensor] = ScaleVariant
pair: Callable[[Tensor], tuple[Tensor, Tensor]] = MinMax
assert torch.equal(unary(x), binary(x, 2.0))
# M: note: Revealed type is "torch._tensor.Tensor"
# P: information: Type of "Provided(x, 2)" is "Tensor"
reveal_type(Provided(x, 2.0))


def vendor_kernel(x: Tensor, k: float = 1.0) -> Tensor:
    return x * k


opclass.add_provider(Provided, "vendor", vendor_kernel, "cpu")
opclass.remove_provider(Provided, "vendor")
opclass.add_provider(Provided, "lazy", "vendor_kernels:scale", "cpu")  # a module imported when first chosen
opclass.remove_provider(Provided, "lazy")

# An out-style kernel: the call takes the functional op's arguments (mypy's plugin skips the
# kernel; pyright reads it, the first kernel hook, and wants its out: a known gap, see the
# typing guide); MyOp.out and MyOp.inplace call the other overloads, statically Any.
# M: note: Revealed type is "torch._tensor.Tensor"
# P: error: Argument missing for parameter "out"  [reportCallIssue]
# P: information: Type of "Norm(x, 0.000001)" is "Unknown"
reveal_type(Norm(x, 1e-6))
Norm.out(x, 1e-6, out=torch.empty(3))
Norm.inplace(x.clone(), 1e-6)
