"""Differential tests: ``MyOp(...)`` (the generated eager fast path) behaves exactly like ``MyOp.op(...)``.

``MyOp(...)`` runs a generated per-class function (``MyOp._opclass_call``) whose guards decide
"plain eager mode" and then call the kernel (or the op's autograd.Function) directly; anything else
goes to the OpOverload. Whatever the guards decide, the caller must not be able to tell: every test
here runs the same inputs (built twice, independently, from the same seed) through both and compares

* the outputs: type, dtype, shape, strides, device, layout, requires_grad, grad_fn, conj/neg bits,
  inference-ness, version counter, values, and which outputs *are* which inputs;
* every input afterwards: values (mutations), version counters, metadata;
* the exception (type and message, addresses blanked) when there is one;
* gradients after ``backward`` of every output that requires grad (and any exception it raises);
* what a context saw: the ops a ``TorchDispatchMode`` / ``TorchFunctionMode`` recorded, the op's
  name in ``torch.profiler``'s key averages, saved-tensor hook calls.

The corpus of ops is built per test in the test's own namespace (the ``ns`` fixture); the matrix
is op x scenario, where a scenario is a tensor variant (requires_grad, non-contiguous, conj, meta,
sparse, subclass, ...) plus a context (no_grad, inference_mode, FakeTensorMode, modes, profiler,
autocast, forward AD, vmap, torch.func.grad, ...); a second test runs every op's other call forms
(argument conversions, argument errors, odd kernel results) in the plain contexts.

opclass picks its guard (native C++ or pure Python) at import; this process tests the active one and
``test_matrix_under_the_other_guard`` reruns this file in a child process under the other.
``test_plain_eager_call_bypasses_the_dispatcher`` makes sure there are two code paths to compare.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import sys
import warnings
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.utils.checkpoint
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.types import Number
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from opclass import CustomOp
from opclass._harness import _after, _backward, _message, call_paths, diff

from _marks import NATIVE_GUARD_MISSING
from _versions import missing_tags

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

# --------------------------------------------------------------------------- the corpus

Make = Callable[["Inputs"], "tuple[tuple[Any, ...], dict[str, Any]]"]


@dataclasses.dataclass
class OpCase:
    """One op of the corpus and the ways to call it (``forms``: name -> input builder)."""

    cls: Any
    forms: dict[str, Make]
    has_tensors: bool = True


def _np(x: Tensor) -> np.ndarray:
    return x.detach().numpy()


def _op_unary(ns: str) -> OpCase:
    class NumpySin(CustomOp, name=f"{ns}::numpy_sin"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.asarray(np.sin(_np(x))))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.cos()

    return OpCase(NumpySin, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_vmap_sin(ns: str) -> OpCase:
    class VmapSin(CustomOp, name=f"{ns}::vmap_sin"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.asarray(np.sin(_np(x))))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.cos()

        @staticmethod
        def vmap(info, in_dims, x):
            return VmapSin(x), in_dims[0]  # elementwise: the batch dim stays where it is

    return OpCase(VmapSin, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_multi(ns: str) -> OpCase:
    class Multi(CustomOp, name=f"{ns}::multi"):
        @staticmethod
        def cpu(
            x: Tensor, y: Tensor, alpha: float = 1.5, n: int = 2, flag: bool = False, *, beta: float = 0.5, scale: int = 1
        ) -> Tensor:
            out = x * alpha + y * beta + n * scale
            return -out if flag else out

        @staticmethod
        def abstract(x, y, alpha=1.5, n=2, flag=False, *, beta=0.5, scale=1):
            return torch.zeros_like(x * alpha + y * beta)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.alpha, ctx.beta = inputs[2], keyword_only_inputs["beta"]
            ctx.sign = -1 if inputs[4] else 1

        @staticmethod
        def backward(ctx, grad):
            return grad * (ctx.alpha * ctx.sign), grad * (ctx.beta * ctx.sign), None, None, None

    def main(I: Inputs) -> Any:
        return (I.T(3, 4), I.T(3, 4), 2.0, 3, True), {"beta": 0.25, "scale": 2}

    def defaults(I: Inputs) -> Any:
        return (I.T(3, 4), I.T(3, 4)), {}

    def with_args(*extra: Any, **kw: Any) -> Make:
        return lambda I: ((I.T(3, 4), I.T(3, 4), *extra), dict(kw))

    forms: dict[str, Make] = {
        "main": main,
        "defaults": defaults,
        "int_for_float": with_args(2, 3, False, beta=1),
        "bool_for_int": with_args(2.0, True),
        "float_for_int": with_args(2.0, 2.5),
        "int_for_bool": with_args(2.0, 1, 1),
        "np_float64_for_float": with_args(np.float64(2.0)),
        "np_int64_for_int": with_args(2.0, np.int64(3)),
        "tensor_for_float": with_args(torch.tensor(2.0)),
        "int64_max": with_args(2.0, 2**63 - 1),
        "int_overflow_2_63": with_args(2.0, 2**63),
        "int_overflow_2_70": with_args(2.0, 2**70),
        "float_inf_nan": with_args(math.inf, 0, False, beta=math.nan),
        "kwonly_positional": with_args(2.0, 3, True, 0.5),
        "too_many": with_args(2.0, 3, True, 0.5, 1),
        "unknown_kwarg": with_args(gamma=1.0),
        "missing_tensor": lambda I: ((I.T(3, 4),), {}),
        "none_for_tensor": lambda I: ((I.T(3, 4), None), {}),
        "float_for_tensor": lambda I: ((I.T(3, 4), 1.0), {}),
        "all_keywords": lambda I: ((), {"x": I.T(3, 4), "y": I.T(3, 4), "alpha": 2.0, "n": 1, "flag": True, "beta": 1.0, "scale": 3}),
        "duplicate_arg": lambda I: ((I.T(3, 4), I.T(3, 4)), {"x": I.T(3, 4)}),
        "broadcast": lambda I: ((I.T(3, 4), I.T(4)), {}),
        "float64_and_float32": lambda I: ((I.T(3, 4, dtype=torch.float64), I.T(3, 4)), {}),
        "zero_dim": lambda I: ((I.T(), I.T()), {}),
        "empty": lambda I: ((I.T(0, 4), I.T(0, 4)), {}),
    }
    return OpCase(Multi, forms)


def _op_mutate(ns: str) -> OpCase:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> None:
            x.add_(y)

    return OpCase(AddInto, {"main": lambda I: ((I.T(3, 4), I.T(3, 4)), {}), "same_tensor": _same_tensor_twice})


def _same_tensor_twice(I: Inputs) -> Any:
    x = I.T(3, 4)
    return (x, x), {}


def _op_mutate_np(ns: str) -> OpCase:
    class NumpyAddOne(CustomOp, name=f"{ns}::numpy_add_one", mutates_args=("x",)):
        """Mutates through NumPy: only the op's own version bump marks the change."""

        @staticmethod
        def cpu(x: Tensor) -> None:
            a = _np(x)
            np.add(a, 1.0, out=a)

    return OpCase(NumpyAddOne, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_mutate_ret(ns: str) -> OpCase:
    class ScaleBuf(CustomOp, name=f"{ns}::scale_buf", mutates_args=("buf",)):
        @staticmethod
        def cpu(x: Tensor, buf: Tensor) -> Tensor:
            buf.mul_(2)
            return x + buf

        @staticmethod
        def abstract(x: Tensor, buf: Tensor) -> Tensor:
            return torch.zeros_like(x + buf)

    return OpCase(ScaleBuf, {"main": lambda I: ((I.T(3, 4), I.T(3, 4)), {})})


def _op_inplace(ns: str) -> OpCase:
    class Scale_(CustomOp, name=f"{ns}::scale_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor, factor: float = 2.0) -> Tensor:
            return x.mul_(factor)

    return OpCase(
        Scale_,
        {
            "main": lambda I: ((I.T(3, 4), 3.0), {}),
            "default_factor": lambda I: ((I.T(3, 4),), {}),
            "int_factor": lambda I: ((I.T(3, 4), 3), {}),
        },
    )


def _op_out(ns: str) -> OpCase:
    class SinOut(CustomOp, name=f"{ns}::sin.out", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            return torch.sin(x, out=out)

    return OpCase(
        SinOut,
        {
            "main": lambda I: ((I.T(3, 4),), {"out": I.T(3, 4)}),
            "out_positional": lambda I: ((I.T(3, 4), I.T(3, 4)), {}),
            "out_missing": lambda I: ((I.T(3, 4),), {}),
            "out_wrong_shape": lambda I: ((I.T(3, 4),), {"out": I.T(2)}),
        },
    )


def _op_multi_out(ns: str) -> OpCase:
    class SinCos(CustomOp, name=f"{ns}::sincos"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return torch.sin(x), torch.cos(x)

        @staticmethod
        def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
            return torch.zeros_like(x), torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad_sin, grad_cos):
            (x,) = ctx.saved_tensors
            return grad_sin * x.cos() - grad_cos * x.sin()

    return OpCase(SinCos, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_list_in(ns: str) -> OpCase:
    class WeightedSum(CustomOp, name=f"{ns}::weighted_sum"):
        @staticmethod
        def cpu(xs: list[Tensor], weights: list[float]) -> Tensor:
            if len(xs) != len(weights) or not xs:
                raise ValueError(f"weighted_sum: {len(xs)} tensors but {len(weights)} weights")
            total = xs[0] * weights[0]
            for x, w in zip(xs[1:], weights[1:]):
                total = total + x * w
            return total

        @staticmethod
        def abstract(xs: list[Tensor], weights: list[float]) -> Tensor:
            torch._check(len(xs) == len(weights) and len(xs) > 0, lambda: "weighted_sum: need one weight per tensor")
            return torch.zeros_like(xs[0] * weights[0])

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.weights = list(inputs[1])

        @staticmethod
        def backward(ctx, grad):
            return [grad * w for w in ctx.weights], None

    return OpCase(
        WeightedSum,
        {
            "main": lambda I: (([I.T(3, 4), I.T(3, 4), I.T(3, 4)], [1.0, -2.0, 0.5]), {}),
            "tuple": lambda I: (((I.T(3, 4), I.T(3, 4)), (1.0, 2.0)), {}),
            "int_weights": lambda I: (([I.T(3, 4), I.T(3, 4)], [1, 2]), {}),
            "mismatch": lambda I: (([I.T(3, 4), I.T(3, 4)], [1.0]), {}),
            "empty": lambda I: (([], []), {}),
            "none_element": lambda I: (([I.T(3, 4), None], [1.0, 2.0]), {}),
            "float_element": lambda I: (([I.T(3, 4), 1.0], [1.0, 2.0]), {}),
            "generator": lambda I: (((t for t in [I.T(3, 4)]), [1.0]), {}),
            "tensor_for_list": lambda I: ((I.T(2, 3), [1.0, 2.0]), {}),
            "int_for_list": lambda I: ((5, [1.0]), {}),
            "none_for_list": lambda I: ((None, [1.0]), {}),
            "str_for_list": lambda I: (("ab", [1.0, 2.0]), {}),
            "nested_list": lambda I: (([[I.T(3, 4)]], [1.0]), {}),
            "list_subclass": lambda I: ((_ListSub([I.T(3, 4)]), _ListSub([1.0])), {}),
            "parameter_in_list": lambda I: (([torch.nn.Parameter(I.T(3, 4)), I.T(3, 4)], [1.0, 2.0]), {}),
            "weights_ndarray": lambda I: (([I.T(3, 4)], np.array([1.0])), {}),
            "weights_tensor": lambda I: (([I.T(3, 4)], torch.tensor([1.0])), {}),
            "weights_none": lambda I: (([I.T(3, 4)], None), {}),
            "weights_with_bool": lambda I: (([I.T(3, 4), I.T(3, 4)], [1.0, True]), {}),
        },
    )


class _ListSub(list):  # type: ignore[type-arg]
    """A list subclass (the dispatcher accepts any sequence)."""


def _op_mutate_list(ns: str) -> OpCase:
    class AddOneAll(CustomOp, name=f"{ns}::add_one_all", mutates_args=("xs",)):
        @staticmethod
        def cpu(xs: list[Tensor]) -> None:
            for x in xs:
                x.add_(1)

    return OpCase(
        AddOneAll,
        {
            "main": lambda I: (([I.T(3, 4), I.T(3, 4)],), {}),
            "tuple": lambda I: (((I.T(3, 4), I.T(3, 4)),), {}),
            "same_tensor_twice": lambda I: (lambda x: (([x, x],), {}))(I.T(3, 4)),
            "empty": lambda I: (([],), {}),
        },
    )


def _op_kwarg_tensor(ns: str) -> OpCase:
    class AddKw(CustomOp, name=f"{ns}::add_kw"):
        @staticmethod
        def cpu(x: Tensor, *, other: Tensor, alpha: float = 1.0) -> Tensor:
            return x + alpha * other

        @staticmethod
        def abstract(x: Tensor, *, other: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.zeros_like(x + other)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.alpha = keyword_only_inputs["alpha"]

        @staticmethod
        def backward(ctx, grad):
            return grad, grad * ctx.alpha, None

    return OpCase(
        AddKw,
        {
            "main": lambda I: ((I.T(3, 4),), {"other": I.T(3, 4), "alpha": 2.0}),
            "default_alpha": lambda I: ((I.T(3, 4),), {"other": I.T(3, 4)}),
            "other_positional": lambda I: ((I.T(3, 4), I.T(3, 4)), {}),
            "other_missing": lambda I: ((I.T(3, 4),), {}),
        },
    )


def _op_optional(ns: str) -> OpCase:
    class AddBias(CustomOp, name=f"{ns}::add_bias"):
        @staticmethod
        def cpu(x: Tensor, bias: Optional[Tensor] = None) -> Tensor:
            return x * 2 if bias is None else x * 2 + bias

        @staticmethod
        def abstract(x: Tensor, bias: Optional[Tensor] = None) -> Tensor:
            return torch.zeros_like(x if bias is None else x + bias)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.has_bias = inputs[1] is not None

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, (grad if ctx.has_bias else None)

    return OpCase(
        AddBias,
        {
            "given": lambda I: ((I.T(3, 4), I.T(3, 4)), {}),
            "none": lambda I: ((I.T(3, 4), None), {}),
            "omitted": lambda I: ((I.T(3, 4),), {}),
            "keyword": lambda I: ((I.T(3, 4),), {"bias": I.T(3, 4)}),
        },
    )


def _op_factory(ns: str) -> OpCase:
    class Full(CustomOp, name=f"{ns}::full"):
        @staticmethod
        def cpu(n: int, value: float, device: torch.device) -> Tensor:
            return torch.full((n, n), value)

        @staticmethod
        def abstract(n: int, value: float, device: torch.device) -> Tensor:
            return torch.zeros(n, n, device=device)

    return OpCase(
        Full,
        {
            "main": lambda I: ((3, 1.5, torch.device("cpu")), {}),
            "str_device": lambda I: ((3, 1.5, "cpu"), {}),
            "meta_device": lambda I: ((3, 1.5, torch.device("meta")), {}),
            "meta_str_device": lambda I: ((3, 1.5, "meta"), {}),
            "device_index": lambda I: ((3, 1.5, torch.device("cpu", 0)), {}),
            "int_value": lambda I: ((3, 2, torch.device("cpu")), {}),
            "device_keyword": lambda I: ((3, 1.5), {"device": torch.device("cpu")}),
            "bad_device": lambda I: ((3, 1.5, "nodevice"), {}),
            "int_device": lambda I: ((3, 1.5, 0), {}),
        },
        has_tensors=False,
    )


def _op_default_kernel(ns: str) -> OpCase:
    class TimesK(CustomOp, name=f"{ns}::times_k"):
        @staticmethod
        def default(x: Tensor, k: int = 2) -> Tensor:
            return x * k

        @staticmethod
        def abstract(x: Tensor, k: int = 2) -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.k, None

    return OpCase(TimesK, {"main": lambda I: ((I.T(3, 4), 3), {})})


def _op_cuda_only(ns: str) -> OpCase:
    class CudaOnly(CustomOp, name=f"{ns}::cuda_only"):
        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.zeros_like(x)

    return OpCase(CudaOnly, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_no_backward(ns: str) -> OpCase:
    class NoBackward(CustomOp, name=f"{ns}::no_backward"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 3

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.zeros_like(x)

    return OpCase(NoBackward, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_raises(ns: str) -> OpCase:
    class Raises(CustomOp, name=f"{ns}::raises"):
        @staticmethod
        def cpu(x: Tensor, what: str = "value") -> Tensor:
            if what == "type":
                raise TypeError("kernel raised TypeError")
            if what == "value":
                raise ValueError("kernel raised ValueError")
            return x.clone()

        @staticmethod
        def abstract(x: Tensor, what: str = "value") -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    return OpCase(
        Raises,
        {
            "main": lambda I: ((I.T(3, 4), "value"), {}),
            "type_error": lambda I: ((I.T(3, 4), "type"), {}),
            "ok": lambda I: ((I.T(3, 4), "no"), {}),
        },
    )


def _op_aliasing(ns: str) -> OpCase:
    class ReturnsInput(CustomOp, name=f"{ns}::returns_input"):
        """A buggy kernel: a functional op returning a view of its input (the op must refuse it)."""

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.view(-1)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x.new_zeros(x.numel())

    return OpCase(ReturnsInput, {"main": lambda I: ((I.T(3, 4),), {})})


def _op_autocast_mm(ns: str) -> OpCase:
    class MmT(CustomOp, name=f"{ns}::mm_t"):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return torch.mm(x, y.t())

        @staticmethod
        def abstract(x: Tensor, y: Tensor) -> Tensor:
            return torch.zeros_like(torch.mm(x, y.t()))

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            return grad @ y, grad.t() @ x

    return OpCase(MmT, {"main": lambda I: ((I.T(3, 4), I.T(3, 4)), {})})


def _op_mm_no_autocast(ns: str) -> OpCase:
    class MmPlain(CustomOp, name=f"{ns}::mm_plain"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return torch.mm(x, y.t())

        @staticmethod
        def abstract(x: Tensor, y: Tensor) -> Tensor:
            return torch.zeros_like(torch.mm(x, y.t()))

    return OpCase(MmPlain, {"main": lambda I: ((I.T(3, 4), I.T(3, 4)), {})})


def _op_misc_types(ns: str) -> OpCase:
    class Misc(CustomOp, name=f"{ns}::misc"):
        """Every non-Tensor argument type the schema supports."""

        @staticmethod
        def cpu(
            x: Tensor,
            sizes: list[int],
            scale: Number,
            dtype: torch.dtype,
            mode: str = "add",
            opt: Optional[int] = None,
            opt_list: Optional[list[float]] = None,
            flags: list[bool] = (True, False),
            *,
            layout: torch.layout = torch.strided,
            memory_format: torch.memory_format = torch.contiguous_format,
        ) -> Tensor:
            out = x.reshape(sizes).to(dtype) * scale
            if mode == "neg":
                out = -out
            if opt is not None:
                out = out + opt
            if opt_list is not None:
                out = out + sum(opt_list)
            return out + len(flags) + (layout is torch.strided) + (memory_format is torch.contiguous_format)

        @staticmethod
        def abstract(x, sizes, scale, dtype, mode="add", opt=None, opt_list=None, flags=(True, False), *, layout=torch.strided, memory_format=torch.contiguous_format):
            return x.new_zeros(sizes, dtype=dtype)

    def call(*rest: Any, **kw: Any) -> Make:
        return lambda I: ((I.T(3, 4), *rest), dict(kw))

    return OpCase(
        Misc,
        {
            "main": call([2, 6], 2.0, torch.float64, "neg", 3, [0.5, 1.5], [True], layout=torch.strided, memory_format=torch.preserve_format),
            "defaults": call([12], 2, torch.float32),
            "sizes_tuple": call((2, 6), 2.0, torch.float64),
            "sizes_size": call(torch.Size([2, 6]), 2.0, torch.float64),
            "sizes_np_ints": call([np.int64(2), np.int64(6)], 2.0, torch.float64),
            "sizes_bool": call([True, 12], 2.0, torch.float64),
            "sizes_overflow": call([2**64, 6], 2.0, torch.float64),
            "sizes_symbolic_minus_one": call([-1, 6], 2.0, torch.float64),
            "sizes_int": call(12, 2.0, torch.float64),
            "scale_bool": call([12], True, torch.float64),
            "scale_complex": call([12], 1 + 2j, torch.complex64),
            "scale_tensor": call([12], torch.tensor(2.0), torch.float64),
            "scale_np": call([12], np.float32(2.0), torch.float64),
            "dtype_str": call([12], 2.0, "float64"),
            "dtype_int": call([12], 2.0, 7),
            "mode_int": call([12], 2.0, torch.float64, 1),
            "opt_bool": call([12], 2.0, torch.float64, "add", True),
            "opt_overflow": call([12], 2.0, torch.float64, "add", -(2**63) - 1),
            "opt_list_ints": call([12], 2.0, torch.float64, "add", None, [1, 2]),
            "opt_list_tuple": call([12], 2.0, torch.float64, "add", None, (1.0, 2.0)),
            "opt_list_mixed": call([12], 2.0, torch.float64, "add", None, [1.0, 2]),
            "flags_ints": call([12], 2.0, torch.float64, "add", None, None, [1, 0]),
            "flags_tuple": call([12], 2.0, torch.float64, "add", None, None, (False,)),
            "layout_sparse": call([12], 2.0, torch.float64, layout=torch.sparse_coo),
            "layout_str": call([12], 2.0, torch.float64, layout="strided"),
            "memory_format_channels_last": call([12], 2.0, torch.float64, memory_format=torch.channels_last),
        },
    )


def _op_optional_tensor_list(ns: str) -> OpCase:
    class SumSome(CustomOp, name=f"{ns}::sum_some"):
        @staticmethod
        def cpu(xs: list[Optional[Tensor]], w: float = 1.0) -> Tensor:
            present = [x for x in xs if x is not None]
            if not present:
                raise ValueError("sum_some: every tensor is None")
            total = present[0] * w
            for x in present[1:]:
                total = total + x * w
            return total

        @staticmethod
        def abstract(xs: list[Optional[Tensor]], w: float = 1.0) -> Tensor:
            present = [x for x in xs if x is not None]
            torch._check(len(present) > 0, lambda: "sum_some: every tensor is None")
            return torch.zeros_like(present[0])

    return OpCase(
        SumSome,
        {
            "main": lambda I: (([I.T(3, 4), None, I.T(3, 4)], 2.0), {}),
            "all_none": lambda I: (([None, None],), {}),
            "none_first": lambda I: (([None, I.T(3, 4)],), {}),
            "tuple": lambda I: (((I.T(3, 4), None),), {}),
        },
    )


def _returning(how: str) -> Make:
    return lambda I: ((I.T(3), how), {})


def _op_ret_tensor(ns: str) -> OpCase:
    class RetTensor(CustomOp, name=f"{ns}::ret_tensor"):
        """The kernel returns something other than the Tensor its schema promises (``how``)."""

        @staticmethod
        def cpu(x: Tensor, how: str) -> Tensor:
            y = x * 2
            return {
                "ok": y,
                "ndarray": y.numpy(),
                "float": 3.0,
                "list": [y],
                "tuple1": (y,),
                "none": None,
                "parameter": torch.nn.Parameter(y),
                "subclass": y.as_subclass(PlainSub),
            }[how]

    hows = ["ok", "ndarray", "float", "list", "tuple1", "none", "parameter", "subclass"]
    return OpCase(RetTensor, {h: _returning(h) for h in hows})


def _op_ret_pair(ns: str) -> OpCase:
    class RetPair(CustomOp, name=f"{ns}::ret_pair"):
        @staticmethod
        def cpu(x: Tensor, how: str) -> tuple[Tensor, Tensor]:
            a, b = x * 2, x * 3
            # (Not here: a tuple of the wrong length. torch's dispatcher does not check the arity of a
            # Python kernel's result: too long a tuple crashes the interpreter in torch 2.13.)
            return {"tuple": (a, b), "list": [a, b], "tensor": a}[how]

    return OpCase(RetPair, {h: _returning(h) for h in ["tuple", "list", "tensor"]})


def _op_ret_list(ns: str) -> OpCase:
    class RetList(CustomOp, name=f"{ns}::ret_list"):
        @staticmethod
        def cpu(x: Tensor, how: str) -> list[Tensor]:
            a, b = x * 2, x * 3
            return {"list": [a, b], "tuple": (a, b), "empty": [], "generator": (t for t in (a, b))}[how]

    return OpCase(RetList, {h: _returning(h) for h in ["list", "tuple", "empty", "generator"]})


def _op_ret_numbers(ns: str) -> OpCase:
    class RetNumbers(CustomOp, name=f"{ns}::ret_numbers"):
        """Non-Tensor returns: the dispatcher converts them to the schema's types."""

        @staticmethod
        def cpu(x: Tensor, how: str) -> tuple[Tensor, int, float, bool]:
            y = x * 2
            return {
                "exact": (y, 3, 2.5, True),
                "numpy": (y, np.int64(3), np.float64(2.5), np.bool_(True)),
                "swapped": (y, True, 2, 1),
                "tensors": (y, torch.tensor(3), torch.tensor(2.5), torch.tensor(True)),
                "bigint": (y, 2**70, 2.5, True),
                "wrong": (y, 2.5, "x", None),
            }[how]

    hows = ["exact", "numpy", "swapped", "tensors", "bigint", "wrong"]
    return OpCase(RetNumbers, {h: _returning(h) for h in hows})


def _op_ret_mutable(ns: str) -> OpCase:
    class RetMutable(CustomOp, name=f"{ns}::ret_mutable", mutates_args=("x",)):
        """A mutable op whose schema returns nothing, with a kernel that returns something."""

        @staticmethod
        def cpu(x: Tensor, how: str) -> None:
            x.add_(1)
            return {"none": None, "tensor": x, "int": 1}[how]  # type: ignore[return-value]

    return OpCase(RetMutable, {h: _returning(h) for h in ["none", "tensor", "int"]})


def _op_annotated(ns: str, key: str) -> OpCase:
    """A simple op (the native C entry takes it) whose kernel returns a fresh Tensor where its
    annotation promises something else: the dispatcher converts the result, or raises."""
    annotation = {"float_from_tensor": "float", "list_from_tensor": "list[Tensor]", "pair_from_tensor": "tuple[Tensor, Tensor]", "none_from_tensor": "None"}[key]
    scope: dict[str, Any] = {"CustomOp": CustomOp, "Tensor": Tensor}
    exec(  # noqa: S102 - the annotation is what varies
        f"class Annotated(CustomOp, name='{ns}::{key}'):\n"
        f"    @staticmethod\n"
        f"    def cpu(x: Tensor, k: float) -> {annotation}:\n"
        f"        return (x * k).sum() if {key == 'float_from_tensor'} else x * k\n",
        scope,
    )
    return OpCase(scope["Annotated"], {"main": lambda I: ((I.T(3), 2.0), {})})


def _op_alias_kinds(ns: str) -> OpCase:
    class AliasKinds(CustomOp, name=f"{ns}::alias_kinds"):
        """Outputs that share memory with an input in ways the output check may or may not see."""

        @staticmethod
        def cpu(x: Tensor, how: str) -> Tensor:
            return {
                "fresh": lambda: x * 2,
                "input": lambda: x,
                "view": lambda: x.view(-1),
                "detach": lambda: x.detach(),
                "data": lambda: x.data,
                "from_numpy": lambda: torch.from_numpy(x.detach().numpy()),
                "as_strided": lambda: x.as_strided(x.shape, x.stride()),
                "view_of_fresh": lambda: (x * 2).view(-1),
            }[how]()

    hows = ["fresh", "input", "view", "detach", "data", "from_numpy", "as_strided", "view_of_fresh"]
    return OpCase(AliasKinds, {h: _returning(h) for h in hows})


def _op_alias_pair(ns: str) -> OpCase:
    class AliasPair(CustomOp, name=f"{ns}::alias_pair"):
        @staticmethod
        def cpu(x: Tensor, how: str) -> tuple[Tensor, Tensor]:
            y = x * 2
            return {"fresh": (y, x * 3), "same": (y, y), "view": (y, y.view(-1)), "input": (y, x)}[how]

    return OpCase(AliasPair, {h: _returning(h) for h in ["fresh", "same", "view", "input"]})


def _op_providers(ns: str, predicate: bool) -> OpCase:
    import opclass

    first = opclass.provider("cpu", supports=(lambda x, k: x.dtype == torch.float32) if predicate else None)

    class Provided(CustomOp, name=f"{ns}::provided"):
        """Three kernels: a NumPy provider first (float32 only, where it has a predicate), a torch
        one, then the op's default; one autograd formula for all."""

        @staticmethod
        def default(x: Tensor, k: float = 2.0) -> Tensor:
            return x * k

        @first
        @staticmethod
        def numpy(x: Tensor, k: float = 2.0) -> Tensor:
            return torch.from_numpy(np.asarray(_np(x) * k, dtype=_np(x).dtype))

        @opclass.provider("cpu")
        @staticmethod
        def torch_mul(x: Tensor, k: float = 2.0) -> Tensor:
            return torch.mul(x, k)

        @staticmethod
        def abstract(x: Tensor, k: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.k, None

    return OpCase(Provided, {"main": lambda I: ((I.T(3, 4), 3.0), {}), "default_k": lambda I: ((I.T(3, 4),), {})})


CORPUS: dict[str, Callable[[str], OpCase]] = {
    "providers": functools.partial(_op_providers, predicate=False),
    "providers_predicate": functools.partial(_op_providers, predicate=True),
    "unary": _op_unary,
    "vmap_sin": _op_vmap_sin,
    "multi": _op_multi,
    "mutate": _op_mutate,
    "mutate_np": _op_mutate_np,
    "mutate_ret": _op_mutate_ret,
    "inplace": _op_inplace,
    "out": _op_out,
    "multi_out": _op_multi_out,
    "list_in": _op_list_in,
    "mutate_list": _op_mutate_list,
    "kwarg_tensor": _op_kwarg_tensor,
    "optional": _op_optional,
    "factory": _op_factory,
    "default_kernel": _op_default_kernel,
    "cuda_only": _op_cuda_only,
    "no_backward": _op_no_backward,
    "raises": _op_raises,
    "aliasing": _op_aliasing,
    "autocast_mm": _op_autocast_mm,
    "mm_no_autocast": _op_mm_no_autocast,
    "misc_types": _op_misc_types,
    "optional_tensor_list": _op_optional_tensor_list,
    "ret_tensor": _op_ret_tensor,
    "ret_pair": _op_ret_pair,
    "ret_list": _op_ret_list,
    "ret_numbers": _op_ret_numbers,
    "ret_mutable": _op_ret_mutable,
    "alias_kinds": _op_alias_kinds,
    "alias_pair": _op_alias_pair,
    **{key: functools.partial(_op_annotated, key=key) for key in ("float_from_tensor", "list_from_tensor", "pair_from_tensor", "none_from_tensor")},
}


# Corpus ops tagged with a tag some supported torch lacks (torch 2.11, 2.12: Tag.inplace, Tag.out).
_CORPUS_TAGS = {"inplace": "inplace", "out": "out"}


def make_corpus(ns: str, names: Optional[list[str]] = None) -> dict[str, OpCase]:
    """Define the corpus ops (all, or the ``names`` given) in namespace ``ns``; an op whose tag
    this torch lacks is left out of "all", and skips the test when named."""
    if names is None:
        names = [name for name in CORPUS if name not in _CORPUS_TAGS or missing_tags(_CORPUS_TAGS[name]) is None]
    for name in names:
        reason = missing_tags(_CORPUS_TAGS[name]) if name in _CORPUS_TAGS else None
        if reason is not None:
            pytest.skip(reason)
    return {name: CORPUS[name](ns) for name in names}


# --------------------------------------------------------------------------- inputs and variants

Variant = Callable[[Tensor, int, "Inputs"], Tensor]


class Inputs:
    """Builds one call's inputs. ``T(*shape)`` makes a fresh random Tensor and applies the variant
    (requires_grad, meta, conj, ...); ``leaves`` collects autograd leaves behind views."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self.count = 0
        self.leaves: list[Tensor] = []

    def T(self, *shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
        t = self.variant(torch.randn(shape, dtype=dtype), self.count, self)
        self.count += 1
        return t


def v_plain(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t


def v_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.requires_grad_()


def _noncontig(t: Tensor) -> Tensor:
    return torch.stack([t, t * 0], -1)[..., 0]  # a strided view: strides (8, 2) for (3, 4)


def v_noncontig(t: Tensor, i: int, I: Inputs) -> Tensor:
    return _noncontig(t)


def v_noncontig_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return _noncontig(t).requires_grad_()


def v_transposed_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.mT.contiguous().mT.requires_grad_() if t.dim() >= 2 else t.requires_grad_()


def v_storage_offset(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.stack([t * 0, t])[1]  # contiguous, storage_offset > 0


def v_expanded(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.reshape(-1)[:1].reshape((1,) * t.dim()).expand(t.shape) if t.dim() else t  # zero strides


def v_int64(t: Tensor, i: int, I: Inputs) -> Tensor:
    return (t * 10).long()


def v_bfloat16(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.bfloat16()


def v_inference_first_only(t: Tensor, i: int, I: Inputs) -> Tensor:
    return v_inference(t, i, I) if i == 0 else t


def v_param(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.nn.Parameter(t)


def v_param_no_grad(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.nn.Parameter(t, requires_grad=False)


class PlainSub(torch.Tensor):
    """A Tensor subclass with no overrides of its own."""


def v_subclass(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.as_subclass(PlainSub)


def v_subclass_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.as_subclass(PlainSub).requires_grad_()


def v_conj(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.complex(t, t * 0.5).conj()


def v_conj_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    z = torch.complex(t, t * 0.5).requires_grad_()
    I.leaves.append(z)
    return z.conj()


def v_complex(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.complex(t, t * 0.5)


def v_neg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.complex(t * 0.5, t).conj().imag  # real, with the negative bit set


def v_sparse(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.to_sparse()


def v_meta(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.to("meta")


def v_meta_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.to("meta").requires_grad_()


def v_mixed_devices(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t if i == 0 else t.to("meta")


def v_mixed_devices_meta_first(t: Tensor, i: int, I: Inputs) -> Tensor:
    return t.to("meta") if i == 0 else t


def v_inference(t: Tensor, i: int, I: Inputs) -> Tensor:
    with torch.inference_mode():
        return t.clone()


def v_view_of_rg(t: Tensor, i: int, I: Inputs) -> Tensor:
    base = t.requires_grad_()
    I.leaves.append(base)
    return base * 1  # a non-leaf that requires grad


def v_escaped_grad_wrapper(t: Tensor, i: int, I: Inputs) -> Tensor:
    """A tensor that escaped from ``torch.func.grad``: a dead functorch wrapper, type ``torch.Tensor``."""
    box: list[Tensor] = []

    def f(a: Tensor) -> Tensor:
        box.append(a)
        return a.sum()

    torch.func.grad(f)(t)
    return box[0]


def v_quantized(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.quantize_per_tensor(t, 0.1, 0, torch.qint8)


def v_nested(t: Tensor, i: int, I: Inputs) -> Tensor:
    rows = list(t.reshape(-1, t.shape[-1]).unbind()) if t.dim() >= 1 else [t.reshape(1)]
    return torch.nested.nested_tensor([r[: 1 + k % r.shape[0]] if r.shape[0] else r for k, r in enumerate(rows)])


def v_nested_uniform(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch.nested.nested_tensor(list(t.reshape(-1, t.shape[-1]).unbind()) if t.dim() >= 1 else [t.reshape(1)])


def v_zero_tensor(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch._efficientzerotensor(t.shape, dtype=t.dtype)


def v_functional(t: Tensor, i: int, I: Inputs) -> Tensor:
    return torch._to_functional_tensor(t)


# --------------------------------------------------------------------------- contexts


class RecordingDispatchMode(TorchDispatchMode):
    """Records every op it sees (``str(func)``) and runs it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class RecordingFunctionMode(TorchFunctionMode):
    """Records every function it sees and runs it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)) if not isinstance(func, torch._ops.OpOverload) else str(func))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def inference_enable_grad() -> Iterator[None]:
    with torch.inference_mode(), torch.enable_grad():
        yield


@contextlib.contextmanager
def below_autograd_enable_grad() -> Iterator[None]:
    with torch._C._AutoDispatchBelowAutograd(), torch.enable_grad():
        yield


@contextlib.contextmanager
def inference_mode_off_inside() -> Iterator[None]:
    with torch.inference_mode(), torch.inference_mode(False):
        yield


def exclude_cpu_key() -> Any:
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU))


def exclude_ad_inplace_or_view() -> Any:
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView))


@contextlib.contextmanager
def functionalization() -> Iterator[None]:
    torch._enable_functionalization(reapply_views=True)
    try:
        yield
    finally:
        torch._disable_functionalization()


class SavedTensorsCounter:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pack(self, t: Tensor) -> Tensor:
        self.events.append(f"pack {tuple(t.shape)}")
        return t

    def unpack(self, t: Tensor) -> Tensor:
        self.events.append(f"unpack {tuple(t.shape)}")
        return t

    @contextlib.contextmanager
    def cm(self) -> Iterator["SavedTensorsCounter"]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            yield self


def wrap_vmap(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    in_dims = tuple(tree_map(lambda v: 0 if isinstance(v, Tensor) else None, a) for a in args)
    return torch.vmap(lambda *a: fn(*a, **kwargs), in_dims=in_dims)(*args)


def _loss(out: Any, args: Any) -> Tensor:
    tensors = [t for t in tree_leaves(out) if isinstance(t, Tensor)] or [t for t in tree_leaves(args) if isinstance(t, Tensor)]
    return sum((t.real.sum() if t.is_complex() else t.sum()) for t in tensors)  # type: ignore[return-value]


def wrap_forward_ad(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    def dual(t: Tensor) -> Tensor:
        return fwAD.make_dual(t, torch.ones_like(t)) if t.is_floating_point() or t.is_complex() else t

    with fwAD.dual_level():
        d_args, d_kwargs = tree_map_only(Tensor, dual, (args, kwargs))
        out = fn(*d_args, **d_kwargs)
        return tree_map_only(Tensor, lambda t: tuple(fwAD.unpack_dual(t)), out)


def wrap_checkpoint(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return torch.utils.checkpoint.checkpoint(lambda *a: fn(*a, **kwargs), *args, use_reentrant=False)


def wrap_dual_level_only(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with fwAD.dual_level():  # a forward-AD level is open, but no input is dual
        return fn(*args, **kwargs)


def wrap_jit_trace(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Traced with every Tensor argument as an input; the non-Tensor ones become constants.
    flat = [a for a in args]
    positions = [i for i, a in enumerate(flat) if isinstance(a, Tensor)]

    def traced_fn(*tensors: Tensor) -> Any:
        full = list(flat)
        for i, t in zip(positions, tensors):
            full[i] = t
        return fn(*full, **kwargs)

    traced = torch.jit.trace(traced_fn, tuple(flat[i] for i in positions), check_trace=False)
    return traced(*(flat[i] for i in positions))


@dataclasses.dataclass
class Scenario:
    """A tensor variant plus the context and/or transform the call runs under."""

    name: str
    variant: Variant = v_plain
    context: Callable[[], Any] = contextlib.nullcontext
    wrap: Optional[Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]] = None
    inputs_inside: bool = False  # build the inputs inside the context (FakeTensorMode)
    backward_inside: bool = False  # run backward inside the context
    observe: Optional[Callable[[Any], Any]] = None  # what the context saw, compared between the calls
    must_see_op: bool = False  # the observation must contain the op, for both calls
    needs_tensors: bool = False  # skip for ops without Tensor arguments


def _profiler() -> Any:
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


def _profile_keys(prof: Any) -> list[str]:
    return sorted({e.key for e in prof.key_averages() if "::" in e.key and not e.key.startswith(("aten::", "autograd::"))})


def _seen(mode: Any) -> list[str]:
    return list(mode.seen)


SCENARIOS: list[Scenario] = [
    Scenario("plain"),
    Scenario("grad_requires_grad", v_rg),
    Scenario("grad_no_requires_grad", v_plain, torch.enable_grad),
    Scenario("no_grad_requires_grad", v_rg, torch.no_grad),
    Scenario("set_grad_enabled_false", v_rg, lambda: torch.set_grad_enabled(False)),
    Scenario("inference_mode_normal", v_plain, torch.inference_mode),
    Scenario("inference_mode_normal_requires_grad", v_rg, torch.inference_mode),
    Scenario("inference_mode_inference_tensors", v_inference, torch.inference_mode, needs_tensors=True),
    Scenario("inference_tensors_outside_mode", v_inference, needs_tensors=True),
    Scenario("inference_mode_enable_grad_requires_grad", v_rg, inference_enable_grad, needs_tensors=True),
    Scenario("below_autograd_enable_grad_requires_grad", v_rg, below_autograd_enable_grad, needs_tensors=True),
    Scenario("inference_mode_false", v_rg, lambda: torch.inference_mode(False)),
    Scenario("inference_mode_false_inside_inference_mode", v_rg, inference_mode_off_inside),
    Scenario("below_ad_inplace_or_view", v_plain, torch._C._AutoDispatchBelowADInplaceOrView, needs_tensors=True),
    Scenario("exclude_ad_inplace_or_view", v_plain, exclude_ad_inplace_or_view, needs_tensors=True),
    Scenario("exclude_cpu_dispatch_key", v_plain, exclude_cpu_key),
    Scenario("fake_tensor_mode", v_plain, FakeTensorMode, inputs_inside=True, backward_inside=True),
    Scenario("fake_tensor_mode_requires_grad", v_rg, FakeTensorMode, inputs_inside=True, backward_inside=True, needs_tensors=True),
    Scenario("dispatch_mode", v_plain, RecordingDispatchMode, observe=_seen, must_see_op=True),
    Scenario("dispatch_mode_requires_grad", v_rg, RecordingDispatchMode, observe=_seen, must_see_op=True, needs_tensors=True),
    Scenario("function_mode", v_plain, RecordingFunctionMode, observe=_seen, must_see_op=True),
    Scenario("device_meta_context", v_plain, lambda: torch.device("meta")),
    Scenario("python_dispatcher", v_rg, lambda: torch._dispatch.python.enable_python_dispatcher()),
    Scenario("pre_dispatch", v_rg, lambda: torch._C._EnablePreDispatch()),
    Scenario("disable_torch_function_subclass", v_subclass_rg, lambda: torch._C.DisableTorchFunctionSubclass(), needs_tensors=True),
    Scenario("disable_torch_function", v_subclass, lambda: torch._C.DisableTorchFunction(), needs_tensors=True),
    Scenario("device_cpu_context_requires_grad", v_rg, lambda: torch.device("cpu")),
    Scenario("vmap", v_plain, wrap=wrap_vmap),
    Scenario("vmap_requires_grad", v_rg, wrap=wrap_vmap, needs_tensors=True),
    # torch.func.grad / vjp are not here: the class call supports them (it applies the op's
    # Function from Python) where MyOp.op cannot, by design; tests/test_torch_func.py covers them.
    Scenario("meta_tensors", v_meta, needs_tensors=True),
    Scenario("meta_tensors_requires_grad", v_meta_rg, needs_tensors=True),
    Scenario("tensor_subclass", v_subclass, needs_tensors=True),
    Scenario("tensor_subclass_requires_grad", v_subclass_rg, needs_tensors=True),
    Scenario("complex", v_complex, needs_tensors=True),
    Scenario("conj", v_conj, needs_tensors=True),
    Scenario("conj_requires_grad", v_conj_rg, needs_tensors=True),
    Scenario("neg_bit", v_neg, needs_tensors=True),
    Scenario("sparse", v_sparse, needs_tensors=True),
    Scenario("profiler", v_plain, _profiler, observe=_profile_keys, must_see_op=True),
    Scenario("profiler_requires_grad", v_rg, _profiler, observe=_profile_keys, must_see_op=True, needs_tensors=True),
    Scenario("autocast_cpu", v_plain, lambda: torch.autocast("cpu")),
    Scenario("autocast_cpu_requires_grad", v_rg, lambda: torch.autocast("cpu"), needs_tensors=True),
    Scenario("autocast_cpu_disabled", v_rg, lambda: torch.autocast("cpu", enabled=False), needs_tensors=True),
    Scenario("forward_ad", v_plain, wrap=wrap_forward_ad),
    Scenario("forward_ad_level_no_duals", v_rg, wrap=wrap_dual_level_only),
    Scenario("anomaly_mode_requires_grad", v_rg, torch.autograd.detect_anomaly, needs_tensors=True),
    Scenario("checkpoint_non_reentrant", v_rg, wrap=wrap_checkpoint, needs_tensors=True),
    Scenario("saved_tensors_hooks", v_rg, lambda: SavedTensorsCounter().cm(), observe=lambda c: list(c.events), needs_tensors=True),
    Scenario("noncontiguous", v_noncontig, needs_tensors=True),
    Scenario("noncontiguous_requires_grad", v_noncontig_rg, needs_tensors=True),
    Scenario("transposed_requires_grad", v_transposed_rg, needs_tensors=True),
    Scenario("non_leaf_requires_grad", v_view_of_rg, needs_tensors=True),
    Scenario("storage_offset", v_storage_offset, needs_tensors=True),
    Scenario("expanded_zero_strides", v_expanded, needs_tensors=True),
    Scenario("int64_tensors", v_int64, needs_tensors=True),
    Scenario("bfloat16_tensors", v_bfloat16, needs_tensors=True),
    Scenario("inference_and_normal_tensors", v_inference_first_only, needs_tensors=True),
    Scenario("inference_and_normal_tensors_in_inference_mode", v_inference_first_only, torch.inference_mode, needs_tensors=True),
    Scenario("parameter", v_param, needs_tensors=True),
    Scenario("parameter_no_grad", v_param_no_grad, needs_tensors=True),
    Scenario("mixed_devices_cpu_then_meta", v_mixed_devices, needs_tensors=True),
    Scenario("mixed_devices_meta_then_cpu", v_mixed_devices_meta_first, needs_tensors=True),
    Scenario("escaped_functorch_grad_wrapper", v_escaped_grad_wrapper, needs_tensors=True),
    Scenario("quantized", v_quantized, needs_tensors=True),
    Scenario("nested_strided", v_nested, needs_tensors=True),
    Scenario("nested_strided_uniform", v_nested_uniform, needs_tensors=True),
    Scenario("zero_tensor", v_zero_tensor, needs_tensors=True),
    Scenario("functionalization", v_functional, functionalization, needs_tensors=True),
    Scenario("jit_trace", v_plain, wrap=wrap_jit_trace, needs_tensors=True),
    # A providers block open (this thread's overrides: none): ops with providers take the dispatcher.
    Scenario("providers_block", v_plain, lambda: __import__("opclass").use_providers()),
    Scenario("providers_block_requires_grad", v_rg, lambda: __import__("opclass").use_providers(), needs_tensors=True),
]
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}

# op x call form of the main matrix
MATRIX: list[tuple[str, str]] = [
    ("providers", "main"),
    ("providers", "default_k"),
    ("providers_predicate", "main"),
    ("providers_predicate", "default_k"),
    ("unary", "main"),
    ("vmap_sin", "main"),
    ("multi", "main"),
    ("multi", "defaults"),
    ("mutate", "main"),
    ("mutate_np", "main"),
    ("mutate_ret", "main"),
    ("inplace", "main"),
    ("out", "main"),
    ("multi_out", "main"),
    ("list_in", "main"),
    ("list_in", "tuple"),
    ("mutate_list", "main"),
    ("kwarg_tensor", "main"),
    ("optional", "given"),
    ("optional", "none"),
    ("factory", "main"),
    ("default_kernel", "main"),
    ("cuda_only", "main"),
    ("no_backward", "main"),
    ("raises", "main"),
    ("aliasing", "main"),
    ("autocast_mm", "main"),
    ("mm_no_autocast", "main"),
    ("misc_types", "main"),
    ("optional_tensor_list", "main"),
    ("float_from_tensor", "main"),
    ("list_from_tensor", "main"),
    ("pair_from_tensor", "main"),
    ("none_from_tensor", "main"),
]

# --------------------------------------------------------------------------- snapshots


def _tensors_in(args: tuple[Any, ...], kwargs: dict[str, Any], extra: list[Tensor]) -> list[Tensor]:
    found = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
    return found + [t for t in extra if all(t is not f for f in found)]


@contextlib.contextmanager
def _entered(cm: Any) -> Iterator[Any]:
    """Enter a context manager or a mode, yielding what ``with`` binds."""
    with cm as value:
        yield value if value is not None else cm


def run_one(
    fn: Callable[..., Any],
    make_inputs: Make,
    scenario: Scenario,
    *,
    backward: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Call ``fn`` once under ``scenario`` on freshly made inputs; everything observable, as data."""
    torch.manual_seed(seed)
    I = Inputs(scenario.variant)
    snap: dict[str, Any] = {}
    cm = scenario.context()
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    out: Any = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not scenario.inputs_inside:
            args, kwargs = make_inputs(I)
        with _entered(cm) as entered:
            if scenario.inputs_inside:
                args, kwargs = make_inputs(I)
            try:
                out = scenario.wrap(fn, args, kwargs) if scenario.wrap is not None else fn(*args, **kwargs)
                snap["exception"] = None
            except Exception as e:
                snap["exception"] = _message(e)
            if scenario.backward_inside:
                snap["backward"] = _backward(out, backward)
        if not scenario.backward_inside:
            snap["backward"] = _backward(out, backward)
        snap.update(_after(out, _tensors_in(args, kwargs, I.leaves)))
        if scenario.observe is not None:
            snap["observed"] = scenario.observe(entered)
    return snap


def assert_same(
    op: Any,
    make_inputs: Make,
    context: Scenario | Callable[[], Any] = contextlib.nullcontext,
    *,
    backward: bool = True,
    keys: Optional[tuple[str, ...]] = None,
) -> dict[str, Any]:
    """Every call path of ``op`` (:func:`opclass._harness.call_paths`: the class call, the other
    guard's call function where both exist, ``op.op``) is indistinguishable from ``op.op``.

    ``make_inputs(I)`` returns ``(args, kwargs)``, building every Tensor with ``I.T(*shape)``; it
    runs once per call, from the same seed, so every call gets equal but independent inputs.
    ``context`` is a :class:`Scenario` or a context-manager factory. Returns the class call's
    snapshot. ``keys`` restricts the comparison to those snapshot entries.
    """
    scenario = context if isinstance(context, Scenario) else Scenario("custom", context=context)
    snaps = {label: run_one(fn, make_inputs, scenario, backward=backward) for label, fn in call_paths(op).items()}
    if keys is not None:
        snaps = {label: {k: v for k, v in snap.items() if k in keys} for label, snap in snaps.items()}
    *fast, reference = snaps
    slow = snaps[reference]
    for label in fast:
        d = diff(snaps[label], slow)
        assert d is None, f"{op.qualname} under {scenario.name}: {label} differs from {reference} at {d}"
    if scenario.must_see_op and slow.get("exception") is None:
        # (An op that raises before reaching the mode, e.g. out= under grad, is seen by none.)
        expected = str(op.op) if scenario.observe is _seen else f"{op.record.namespace}::{op.record.name}"
        for label, snap in snaps.items():
            assert expected in snap["observed"], f"{scenario.name}: {label} was not seen ({expected} not in {snap['observed']})"
    return snaps[fast[0]]


# --------------------------------------------------------------------------- the matrix


def _matrix_params() -> list[Any]:
    params = []
    for op_name, form in MATRIX:
        tensorless = op_name == "factory"
        for s in SCENARIOS:
            if tensorless and s.needs_tensors:
                continue
            params.append(pytest.param(op_name, form, s.name, id=f"{op_name}-{form}-{s.name}"))
    return params


@pytest.mark.parametrize(("op_name", "form", "scenario"), _matrix_params())
def test_fast_path_matches_dispatcher(ns: str, op_name: str, form: str, scenario: str) -> None:
    case = make_corpus(ns, [op_name])[op_name]
    assert_same(case.cls, case.forms[form], SCENARIOS_BY_NAME[scenario])


# Every call form of every op (argument conversions and argument errors), in the plain contexts.
_FORM_SCENARIOS = ("plain", "grad_requires_grad", "no_grad_requires_grad", "inference_mode_normal")


def _form_params() -> list[Any]:
    params = []
    for op_name, forms in _FORMS.items():
        for form in forms:
            for s in _FORM_SCENARIOS:
                params.append(pytest.param(op_name, form, s, id=f"{op_name}-{form}-{s}"))
    return params


_FORMS: dict[str, list[str]] = {
    "multi": [
        "defaults", "int_for_float", "bool_for_int", "float_for_int", "int_for_bool", "np_float64_for_float",
        "np_int64_for_int", "tensor_for_float", "int64_max", "int_overflow_2_63", "int_overflow_2_70", "float_inf_nan",
        "kwonly_positional", "too_many", "unknown_kwarg", "missing_tensor", "none_for_tensor", "float_for_tensor",
        "all_keywords", "duplicate_arg", "broadcast", "float64_and_float32", "zero_dim", "empty",
    ],
    "mutate": ["same_tensor"],
    "inplace": ["default_factor", "int_factor"],
    "out": ["out_positional", "out_missing", "out_wrong_shape"],
    "list_in": [
        "tuple", "int_weights", "mismatch", "empty", "none_element", "float_element", "generator", "tensor_for_list",
        "int_for_list", "none_for_list", "str_for_list", "nested_list", "list_subclass", "parameter_in_list",
        "weights_ndarray", "weights_tensor", "weights_none", "weights_with_bool",
    ],
    "mutate_list": ["tuple", "same_tensor_twice", "empty"],
    "kwarg_tensor": ["default_alpha", "other_positional", "other_missing"],
    "optional": ["omitted", "keyword"],
    "factory": ["str_device", "meta_device", "meta_str_device", "device_index", "int_value", "device_keyword", "bad_device", "int_device"],
    "raises": ["type_error", "ok"],
    "misc_types": [
        "defaults", "sizes_tuple", "sizes_size", "sizes_np_ints", "sizes_bool", "sizes_overflow", "sizes_symbolic_minus_one",
        "sizes_int", "scale_bool", "scale_complex", "scale_tensor", "scale_np", "dtype_str", "dtype_int", "mode_int", "opt_bool",
        "opt_overflow", "opt_list_ints", "opt_list_tuple", "opt_list_mixed", "flags_ints", "flags_tuple", "layout_sparse",
        "layout_str", "memory_format_channels_last",
    ],
    "optional_tensor_list": ["all_none", "none_first", "tuple"],
    "ret_tensor": ["ok", "ndarray", "float", "list", "tuple1", "none", "parameter", "subclass"],
    "ret_pair": ["tuple", "list", "tensor"],
    "ret_list": ["list", "tuple", "empty", "generator"],
    "ret_numbers": ["exact", "numpy", "swapped", "tensors", "bigint", "wrong"],
    "ret_mutable": ["none", "tensor", "int"],
    "alias_kinds": ["fresh", "input", "view", "detach", "data", "from_numpy", "as_strided", "view_of_fresh"],
    "alias_pair": ["fresh", "same", "view", "input"],
}


@pytest.mark.parametrize(("op_name", "form", "scenario"), _form_params())
def test_call_forms_match_dispatcher(ns: str, op_name: str, form: str, scenario: str) -> None:
    case = make_corpus(ns, [op_name])[op_name]
    assert_same(case.cls, case.forms[form], SCENARIOS_BY_NAME[scenario])


def test_forms_table_is_complete(ns: str) -> None:
    """Every call form the corpus defines is exercised (by the matrix or the forms test)."""
    in_matrix = set(MATRIX)
    for op_name, case in make_corpus(ns).items():
        for form in case.forms:
            assert (op_name, form) in in_matrix or form in _FORMS.get(op_name, []), f"{op_name}/{form} is never run"


# --------------------------------------------------------------------------- targeted checks


def test_helper_detects_a_difference(ns: str) -> None:
    """The comparison is not vacuous: a kernel that behaves differently per call is caught."""
    calls = []

    class Flaky(CustomOp, name=f"{ns}::flaky"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            calls.append(1)
            return x + len(calls)

    with pytest.raises(AssertionError, match="differs"):
        assert_same(Flaky, lambda I: ((I.T(3),), {}))


def _called_through_dispatcher() -> bool:
    """Whether an ``OpOverload.__call__`` (torch/_ops.py) is on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("torch", "_ops.py")):
            return True
        frame = frame.f_back
    return False


def test_plain_eager_call_bypasses_the_dispatcher(ns: str) -> None:
    """The differential tests compare two code paths only if there are two: in plain eager mode
    ``MyOp(...)`` must reach the kernel without ``OpOverload.__call__`` (else every test above
    passes vacuously), and ``MyOp.op(...)`` must go through it. Checked for a functional op, a
    mutable op and a Tensor-list op, with and without grad."""
    seen: list[tuple[str, bool]] = []

    class Fwd(CustomOp, name=f"{ns}::fwd"):
        @staticmethod
        def cpu(x: Tensor, k: float = 2.0) -> Tensor:
            seen.append(("fwd", _called_through_dispatcher()))
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.k, None

    class Mut(CustomOp, name=f"{ns}::mut", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor) -> None:
            seen.append(("mut", _called_through_dispatcher()))
            x.add_(1)

    class Lst(CustomOp, name=f"{ns}::lst"):
        @staticmethod
        def cpu(xs: list[Tensor]) -> Tensor:
            seen.append(("lst", _called_through_dispatcher()))
            return xs[0] + xs[1]

    calls = [
        (Fwd, lambda: (torch.randn(3),)),
        (Fwd, lambda: (torch.randn(3, requires_grad=True),)),
        (Mut, lambda: (torch.randn(3),)),
        (Lst, lambda: ([torch.randn(3), torch.randn(3)],)),
    ]
    for cls, make in calls:
        seen.clear()
        cls(*make())
        cls.op(*make())
        name = seen[0][0]
        assert seen == [(name, False), (name, True)], f"{cls.qualname}: (kernel, via OpOverload.__call__) = {seen}"


@pytest.mark.parametrize("op_name", ["unary", "multi", "list_in", "kwarg_tensor", "optional", "multi_out", "autocast_mm"])
def test_grads_match_with_partial_requires_grad(ns: str, op_name: str) -> None:
    """Only some inputs require grad: ``needs_input_grad`` and the gradients agree."""
    case = make_corpus(ns, [op_name])[op_name]
    make = next(iter(case.forms.values()))

    def first_only(t: Tensor, i: int, I: Inputs) -> Tensor:
        return t.requires_grad_() if i == 0 else t

    def last_only(t: Tensor, i: int, I: Inputs) -> Tensor:
        return t.requires_grad_() if i == 1 else t

    for variant in (first_only, last_only):
        assert_same(case.cls, make, Scenario(variant.__name__, variant))


def test_needs_input_grad_seen_by_backward(ns: str) -> None:
    seen: list[tuple[bool, ...]] = []

    class Mul(CustomOp, name=f"{ns}::mul"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, *, z: Optional[Tensor] = None) -> Tensor:
            return x * y if z is None else x * y * z

        @staticmethod
        def abstract(x: Tensor, y: Tensor, *, z: Optional[Tensor] = None) -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            seen.append(tuple(ctx.needs_input_grad))
            x, y = ctx.saved_tensors
            return grad * y, grad * x, None

    for flags in ((True, False, False), (False, True, True), (True, True, False)):
        for fn in (Mul, Mul.op):
            x, y, z = (torch.randn(3, requires_grad=f) for f in flags)
            fn(x, y, z=z).sum().backward()
        assert seen[-1] == seen[-2], f"{flags}: needs_input_grad {seen[-2]} (fast) vs {seen[-1]} (dispatcher)"


@pytest.mark.parametrize("op_name", ["unary", "multi", "mutate", "inplace", "out", "list_in", "optional", "kwarg_tensor"])
def test_compile_matches_eager(ns: str, op_name: str) -> None:
    """``torch.compile(fullgraph=True, backend="aot_eager")`` over ``MyOp(...)`` computes what eager
    ``MyOp.op(...)`` does: outputs, mutations, gradients."""
    torch._dynamo.reset()
    try:
        case = make_corpus(ns, [op_name])[op_name]
        make = next(iter(case.forms.values()))
        functional = case.cls.record.is_functional
        variant = v_rg if functional else v_plain

        def compiled_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            def f(*a: Any, **k: Any) -> Any:
                return fn(*a, **k)

            return torch.compile(f, backend="aot_eager", fullgraph=True)(*args, **kwargs)

        got = run_one(case.cls, make, Scenario("compile", variant, wrap=compiled_call))
        expected = run_one(case.cls.op, make, Scenario("eager", variant))
        assert got["exception"] is None, got["exception"]

        def values(snap: Any) -> Any:
            """Data, dtype and shape only: compiled outputs have their own grad_fn and strides."""
            if isinstance(snap, dict) and "values" in snap and "dtype" in snap:
                return {"dtype": snap["dtype"], "shape": snap["shape"], "values": snap["values"]}
            if isinstance(snap, dict):
                return {k: values(v) for k, v in snap.items() if k != "is_input"}
            if isinstance(snap, list):
                return [values(v) for v in snap]
            return snap

        for key in ("exception", "output", "inputs_after", "grads", "backward"):
            d = diff(values(got[key]), values(expected[key]), key)
            assert d is None, f"compiled {case.cls.qualname} differs from eager: {d}"
    finally:
        torch._dynamo.reset()


def test_profiler_records_both_calls(ns: str) -> None:
    case = make_corpus(ns, ["multi"])["multi"]
    for fn in (case.cls, case.cls.op):
        with _profiler() as prof:
            fn(torch.randn(2), torch.randn(2))
        assert f"{ns}::multi" in [e.key for e in prof.key_averages()], fn


def test_dispatch_mode_sees_both_calls_with_tensor_list(ns: str) -> None:
    case = make_corpus(ns, ["list_in"])["list_in"]
    for fn in (case.cls, case.cls.op):
        xs = (torch.randn(2), torch.randn(2))
        with RecordingDispatchMode() as mode:
            fn(xs, (1.0, 2.0))
        assert mode.seen == [str(case.cls.op)], mode.seen


def test_version_counters_of_views_and_bases(ns: str) -> None:
    """Mutating a view bumps the shared counter of its base, the same way on both paths."""
    case = make_corpus(ns, ["mutate_np", "inplace"])
    for name, c in case.items():

        def make(I: Inputs) -> Any:
            base = I.T(4, 6)
            I.leaves.append(base)
            view = base[1:, ::2]
            return ((view,) if name == "mutate_np" else (view, 2.0)), {}

        assert_same(c.cls, make)


def test_inplace_op_returns_its_argument_on_both_paths(ns: str) -> None:
    case = make_corpus(ns, ["inplace", "out"])
    x = torch.randn(3)
    assert case["inplace"].cls(x) is x and case["inplace"].cls.op(x) is x
    out = torch.empty(3)
    assert case["out"].cls(x, out=out) is out and case["out"].cls.op(x, out=out) is out


def test_grad_mode_toggled_between_calls(ns: str) -> None:
    """The guards read grad mode per call, not once."""
    case = make_corpus(ns, ["unary"])["unary"]
    for ctx in (torch.no_grad, torch.enable_grad, torch.no_grad, torch.enable_grad):
        assert_same(case.cls, case.forms["main"], Scenario("toggle", v_rg, ctx))


def test_threads_see_their_own_grad_mode(ns: str) -> None:
    """Grad mode is thread-local; a call from another thread matches the dispatcher there."""
    import threading

    case = make_corpus(ns, ["unary"])["unary"]
    results: dict[str, Any] = {}

    def worker() -> None:
        with torch.no_grad():
            for label, fn in (("fast", case.cls), ("slow", case.cls.op)):
                y = fn(torch.randn(3, requires_grad=True))
                results[label] = (y.requires_grad, y.grad_fn is None)

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert results["fast"] == results["slow"]


@pytest.mark.parametrize("op_name", ["unary", "multi", "multi_out", "list_in", "kwarg_tensor", "autocast_mm"])
def test_double_backward_matches(ns: str, op_name: str) -> None:
    """Gradients of gradients (``create_graph=True``) agree: the backward graphs are the same."""
    case = make_corpus(ns, [op_name])[op_name]
    make = next(iter(case.forms.values()))

    def grad_of_grad(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        leaves = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor) and t.requires_grad]
        out = fn(*args, **kwargs)
        first = torch.autograd.grad(_loss(out, args), leaves, create_graph=True, allow_unused=True)
        used = [g for g in first if g is not None and g.requires_grad]
        second = torch.autograd.grad(sum(g.sum() for g in used), leaves, allow_unused=True) if used else ()
        return out, first, second

    assert_same(case.cls, make, Scenario("double_backward", v_rg, wrap=grad_of_grad))


def test_redefined_op_old_class_matches_dispatcher(ns: str) -> None:
    """After a class is redefined under the same name, the old class calls the new op, like ``.op``."""

    def define(k: float) -> Any:
        class Scale(CustomOp, name=f"{ns}::scale"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x * k

        return Scale

    old = define(2.0)
    new = define(3.0)
    x = torch.ones(2)
    for cls in (old, new):
        assert torch.equal(cls(x), cls.op(x)), cls
        assert torch.equal(cls(x), torch.full((2,), 3.0))


@pytest.mark.parametrize("keyword_only", [False, True])
def test_list_result_of_multi_return_kernel_under_grad(ns: str, keyword_only: bool) -> None:
    """A ``-> tuple[Tensor, Tensor]`` kernel that returns a list, called with grad: outputs, their
    autograd graph and the backward error agree (found by the hypothesis tests)."""
    if keyword_only:

        class Pair(CustomOp, name=f"{ns}::pair_kw"):
            @staticmethod
            def cpu(*, x: Tensor) -> tuple[Tensor, Tensor]:
                return [x * 1, x * 2]  # type: ignore[return-value]

        make: Make = lambda I: ((), {"x": I.T(3)})  # noqa: E731
    else:

        class Pair(CustomOp, name=f"{ns}::pair_pos"):  # type: ignore[no-redef]
            @staticmethod
            def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
                return [x * 1, x * 2]  # type: ignore[return-value]

        make = lambda I: ((I.T(3),), {})  # noqa: E731
    assert_same(Pair, make, SCENARIOS_BY_NAME["grad_requires_grad"])


def test_kernel_returning_clone_under_grad(ns: str) -> None:
    """A kernel returning ``x.clone()`` on the grad path: the output's version counter (and every
    other property) is the same on both paths."""

    class Clone(CustomOp, name=f"{ns}::clone_op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.clone()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.zeros_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad

    assert_same(Clone, lambda I: ((I.T(3),), {}), SCENARIOS_BY_NAME["grad_requires_grad"])


# --------------------------------------------------------------------------- the other guard

_OTHER_GUARD_ENV = "OPCLASS_FASTPATH_EQUIVALENCE_CHILD"


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get(_OTHER_GUARD_ENV)), reason="already the child run")
def test_matrix_under_the_other_guard() -> None:
    """opclass has two guards (native C++ and pure Python; ``OPCLASS_GUARD`` picks one at import).
    This process tests the active one; a child process runs this file under the other."""
    import subprocess

    import opclass

    if opclass.guard_backend() == "native":
        other = "python"
    else:
        from opclass.core import native as _native

        if _native._built_library(_native.cache_dir()) is None:
            pytest.skip(NATIVE_GUARD_MISSING)
        other = "native"
    env = {**os.environ, "OPCLASS_GUARD": other, _OTHER_GUARD_ENV: "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    failed = [line.split(" - ")[0] for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    assert proc.returncode == 0, f"OPCLASS_GUARD={other}: {summary}\n" + "\n".join(failed)
