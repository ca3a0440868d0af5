"""Wrong calls: each is an error under mypy (with the plugin) and pyright."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

import opclass
from ops import MinMax, NoKernelBase, Provided, Quantize, Scale, ScaleVariant, ShardingOnlyBase, WeightedSum

x = torch.ones(3)

# M: error: Argument 2 to "Scale" has incompatible type "str"; expected "float"  [arg-type]
# P: error: Argument of type "Literal['a']" cannot be assigned to parameter "factor" of type "float" in function "__call__"  [reportArgumentType]
Scale(x, "a")
# M: error: Too many positional arguments for "Scale"  [call-arg]
# P: error: Expected 2 positional arguments  [reportCallIssue]
Scale(x, 1.0, x)
# M: error: Unexpected keyword argument "bais" for "Scale"  [call-arg]
# P: error: No parameter named "bais"  [reportCallIssue]
Scale(x, bais=x)
# M: error: Missing positional argument "x" in call to "Scale"  [call-arg]
# P: error: Argument missing for parameter "x"  [reportCallIssue]
Scale()
# M: error: Argument "bias" to "Scale" has incompatible type "int"; expected "Tensor | None"  [arg-type]
# P: error: Argument of type "Literal[1]" cannot be assigned to parameter "bias" of type "Tensor | None" in function "__call__"  [reportArgumentType]
Scale(x, bias=1)
# M: error: Argument 1 to "WeightedSum" has incompatible type "Tensor"; expected "list[Tensor]"  [arg-type]
# P: error: Argument of type "Tensor" cannot be assigned to parameter "xs" of type "list[Tensor]" in function "__call__"  [reportArgumentType]
WeightedSum(x, [1.0])
# M: error: List item 1 has incompatible type "str"; expected "float"  [list-item]
# P: error: Argument of type "list[float | str]" cannot be assigned to parameter "weights" of type "list[float]" in function "__call__"  [reportArgumentType]
WeightedSum([x], [1.0, "2"])
# M: error: Argument 2 to "ScaleVariant" has incompatible type "Tensor"; expected "float"  [arg-type]
# P: error: Argument of type "Tensor" cannot be assigned to parameter "factor" of type "float" in function "__call__"  [reportArgumentType]
ScaleVariant(x, x)
# M: error: Incompatible types in assignment (expression has type "tuple[Tensor, Tensor]", variable has type "Tensor")  [assignment]
# P: error: Type "tuple[Tensor, Tensor]" is not assignable to declared type "Tensor"  [reportAssignmentType]
single: Tensor = MinMax(x)
# M: error: Incompatible types in assignment (expression has type "type[Scale]", variable has type "Callable[[int], Tensor]")  [assignment]
# P: error: Type "type[Scale]" is not assignable to declared type "(int) -> Tensor"  [reportAssignmentType]
wrong: Callable[[int], Tensor] = Scale
# M: error: "NoKernelBase" is an abstract op base (it defines no kernel such as cpu, cuda or default); subclass it and define a kernel to make an op  [misc]
# P: error: Argument of type "Tensor" cannot be assigned to parameter "_abstract_op_base_has_no_kernel" of type "Never" in function "__call__"  [reportArgumentType]
NoKernelBase(x)
# M: error: "ShardingOnlyBase" is an abstract op base (it defines no kernel such as cpu, cuda or default); subclass it and define a kernel to make an op  [misc]
# P: error: Argument of type "Tensor" cannot be assigned to parameter "_abstract_op_base_has_no_kernel" of type "Never" in function "__call__"  [reportArgumentType]
ShardingOnlyBase(x)
# M: error: Argument 2 to "Quantize" has incompatible type "float"; expected "int"  [arg-type]
# P: error: Argument of type "float" cannot be assigned to parameter "quant_min" of type "Int" in function "__call__"  [reportArgumentType]
Quantize(x, 0.5, 255, [0])


def wrong_kernel(x: Tensor, k: str = "1") -> Tensor:
    return x


# The provider's function is checked against the op's signature.
# M: error: Argument 1 to "add_provider" has incompatible type "type[Provided]"; expected "Callable[[Tensor, str], Tensor] | str"  [arg-type]
# P: error: No overloads for "add_provider" match the provided arguments  [reportCallIssue]
# P: error: Argument of type "(x: Tensor, k: str = "1") -> Tensor" cannot be assigned to parameter "fn" of type "(**P@add_provider) -> R@add_provider" in function "add_provider"  [reportArgumentType]
opclass.add_provider(Provided, "wrong", wrong_kernel, "cpu")


def short_kernel(x: Tensor) -> Tensor:
    return x


# A provider takes every parameter of the op, defaulted ones too, as the runtime requires. mypy's
# Callable[P, R] alone lets fn leave k out (the op is callable without it): the plugin's check.
# Pyright has no plugins and the annotation cannot say it.
# M: error: Provider "short" for "Provided" takes "def short_kernel(x: Tensor) -> Tensor"; a provider takes every parameter of the op, by name, with its default: "def Provided(x: Tensor, k: float = ...) -> Tensor"  [arg-type]
# P: none
opclass.add_provider(Provided, "short", short_kernel, "cpu")
