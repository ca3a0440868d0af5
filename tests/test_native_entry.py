"""The native class call's C entry for simple ops (``_opclass_fast``).

With the native guard, a call with every argument positional on an op whose parameters are
Tensors, optional Tensors, floats, ints and bools runs entirely in C. It must decide exactly as
the generated function does: same results, same errors, same hand-over to the dispatcher.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp
from opclass.callpath.classcall import call_function

from _marks import needs_native

def make_axpy(ns: str, calls: list[str] | None = None) -> Any:
    class Axpy(CustomOp, name=f"{ns}::axpy"):
        @staticmethod
        def default(x: Tensor, y: Tensor | None, a: float, n: int, flag: bool) -> Tensor:
            if calls is not None:
                calls.append("kernel")
            out = x * a + n
            return out + y if (flag and y is not None) else out

        @staticmethod
        def abstract(x: Tensor, y: Tensor | None, a: float, n: int, flag: bool) -> Tensor:
            return torch.empty_like(x)

    return Axpy


@needs_native
def test_simple_ops_get_an_entry_others_do_not(ns: str) -> None:
    axpy = make_axpy(ns)
    assert axpy._opclass_fast is None  # made with the call function, on the op's first call
    call_function(axpy)
    assert axpy._opclass_fast is not None

    class KwOnly(CustomOp, name=f"{ns}::kw_only"):
        @staticmethod
        def default(x: Tensor, *, a: float) -> Tensor:
            return x * a

    class Lists(CustomOp, name=f"{ns}::lists"):
        @staticmethod
        def default(xs: list[Tensor]) -> Tensor:
            return xs[0].clone()

    class Mutates(CustomOp, name=f"{ns}::mutates", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor) -> None:
            x.add_(1)

    class Autocast(CustomOp, name=f"{ns}::autocast"):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.clone()

    class WithDtype(CustomOp, name=f"{ns}::with_dtype"):
        @staticmethod
        def default(x: Tensor, dtype: torch.dtype) -> Tensor:
            return x.to(dtype)

    for op in (KwOnly, Lists, Mutates, Autocast, WithDtype):
        call_function(op)
        assert op._opclass_fast is None, op


@pytest.mark.parametrize(
    "args",
    [
        (torch.ones(3), torch.ones(3), 2.0, 1, True),
        (torch.ones(3), None, 2.0, 1, False),
        (torch.ones(3, requires_grad=True), torch.ones(3), 2.0, 1, True),
        (torch.ones(3), torch.ones(3), 2, 1, True),  # int for float: the dispatcher's job
        (torch.ones(3), torch.ones(3), np.float64(2.0), 1, True),
        (torch.ones(3), torch.ones(3), 2.0, True, True),  # bool for int
        (torch.ones(3), torch.ones(3), 2.0, 2**63, True),  # out of int64
        (torch.ones(3), torch.ones(3), 2.0, 1, 1),  # int for bool
        (torch.ones(3), "y", 2.0, 1, True),
        (torch.ones(3), torch.ones(3), 2.0, 1),  # too few
        (torch.ones(3), torch.ones(3), 2.0, 1, True, 5),  # too many
    ],
    ids=lambda a: ",".join(type(v).__name__ for v in a),
)
def test_same_result_or_error_as_the_dispatcher(ns: str, args: tuple[Any, ...]) -> None:
    op = make_axpy(ns)
    try:
        expected: Any = op.op(*args)
    except Exception as e:  # noqa: BLE001 - any error must be the same
        with pytest.raises(type(e)) as info:
            op(*args)
        assert str(info.value) == str(e)
        return
    got = op(*args)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    assert type(got.grad_fn).__name__ == type(expected.grad_fn).__name__


def test_outputs_that_are_not_fresh_get_the_full_check(ns: str) -> None:
    class ReturnsInput(CustomOp, name=f"{ns}::returns_input"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x

    class ReturnsList(CustomOp, name=f"{ns}::returns_list"):
        @staticmethod
        def default(x: Tensor) -> tuple[Tensor, Tensor]:
            return [x + 1, x + 2]  # type: ignore[return-value]

    x = torch.ones(2)
    for call in (ReturnsInput, ReturnsInput.op):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            call(x)
    out = ReturnsList(x)
    assert type(out) is tuple and len(out) == 2
    torch.testing.assert_close(out[1], x + 2)


def test_grad_applies_the_function_and_backward_runs(ns: str) -> None:
    class Sq(CustomOp, name=f"{ns}::sq"):
        @staticmethod
        def default(x: Tensor, p: float) -> Tensor:
            return x.detach() ** p

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(inputs[0])
            ctx.p = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            (x,) = ctx.saved_tensors
            return grad * ctx.p * x ** (ctx.p - 1), None

    x = torch.rand(4, dtype=torch.float64, requires_grad=True)
    y = Sq(x, 3.0)
    assert type(y.grad_fn).__name__ == "SqFunctionBackward"
    assert torch.autograd.gradcheck(lambda t: Sq(t, 3.0), (x,))


def test_a_replaced_class_never_runs_its_old_kernel(ns: str) -> None:
    calls: list[str] = []
    old = make_axpy(ns, calls)
    new = make_axpy(ns)  # same name: replaces the op
    args = (torch.ones(2), None, 1.0, 0, False)
    assert old._opclass_fast is None
    torch.testing.assert_close(old(*args), new(*args))
    assert calls == []
    opclass.remove(new)
    with pytest.raises(RuntimeError, match="was removed"):
        new(*args)
    with pytest.raises(RuntimeError, match="was removed"):
        old(*args)


def test_kernel_runs_once_and_errors_pass_through(ns: str) -> None:
    calls: list[str] = []
    op = make_axpy(ns, calls)
    op(torch.ones(2), None, 1.0, 0, False)
    assert calls == ["kernel"]

    class Boom(CustomOp, name=f"{ns}::boom"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        Boom(torch.ones(1))
