"""Hooks that raise or return the wrong thing: the caller gets the user's error, and nothing is left half-done.

* A kernel that raises: the very exception object (type, message) reaches the caller from
  ``MyOp(...)`` and from ``MyOp.op(...)``, with the kernel's own frame innermost in its traceback;
  with plain and ``requires_grad`` inputs, with grad, under ``no_grad`` and ``inference_mode``. The
  inputs are unchanged (a mutating op's version counter is not bumped when its kernel raises before
  writing) and the next, good call works.
* Autograd state after a failed forward: no ``.grad``, no graph holding the inputs, correct
  gradients from the next call, ``gradcheck`` passes.
* A ``backward`` that raises: the error comes out of ``.backward()``, no gradient is accumulated,
  and a later forward + backward works.
* An ``abstract`` that raises, under ``FakeTensorMode`` and with meta Tensors.
* A kernel that writes to its argument and then raises: the write counts (version counter), and
  autograd refuses a saved Tensor it changed.
* Kernels returning the wrong thing (a float for a Tensor, an input or a Tensor sharing an input's
  storage for a functional op, a tuple or list of the wrong length: torch's dispatcher would crash
  on too many values): the same exception type and message on every call path. Results that keep
  the contract pass: fresh outputs, a clone, a Tensor without storage (sparse).
* An ``abstract`` returning the wrong thing: a float, too few outputs or its own input (the same
  error on every path, under FakeTensorMode and with meta Tensors); too many outputs (in child
  processes: torch's dispatcher may crash on it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import subprocess
import sys
import textwrap
import types
import weakref
from typing import Any, Callable, Optional

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from opclass import CustomOp
from opclass._harness import call_paths, diff, observe

from _errors import compiled_call, error_of, first_line

# Every exception a hook of this file raises, in order: the caller must get these very objects.
RAISED: list[BaseException] = []


def _remember(e: BaseException) -> BaseException:
    RAISED.append(e)
    return e


# --------------------------------------------------------------------------- the ops


def _mul(ns: str) -> Any:
    class Mul(CustomOp, name=f"{ns}::mul"):
        """x * y; each hook raises on request: the kernel for x.sum() < 0, abstract for 2-d
        inputs, backward for a negative incoming gradient."""

        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            if x.sum() < 0:
                raise _remember(ValueError("boom from kernel"))
            return x * y

        @staticmethod
        def abstract(x: Tensor, y: Tensor) -> Tensor:
            if x.dim() == 2:
                raise _remember(ValueError("boom from abstract"))
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, grad):
            if (grad < 0).any():
                raise _remember(ValueError("boom from backward"))
            x, y = ctx.saved_tensors
            return grad * y, grad * x

    return Mul


def _mul_kw(ns: str) -> Any:
    class MulKw(CustomOp, name=f"{ns}::mul_kw"):
        """Mul with a keyword-only argument: the fast path goes through the op's generic Function."""

        @staticmethod
        def cpu(x: Tensor, y: Tensor, *, k: float = 1.0) -> Tensor:
            if x.sum() < 0:
                raise _remember(ValueError("boom from kernel"))
            return x * y * k

        @staticmethod
        def abstract(x: Tensor, y: Tensor, *, k: float = 1.0) -> Tensor:
            if x.dim() == 2:
                raise _remember(ValueError("boom from abstract"))
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.save_for_backward(*inputs)
            ctx.k = keyword_only_inputs["k"]

        @staticmethod
        def backward(ctx, grad):
            if (grad < 0).any():
                raise _remember(ValueError("boom from backward"))
            x, y = ctx.saved_tensors
            return grad * y * ctx.k, grad * x * ctx.k

    return MulKw


def _add_into(ns: str) -> Any:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        """out += x; raises before writing anything when x.sum() < 0."""

        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            if x.sum() < 0:
                raise _remember(ValueError("boom from kernel"))
            out.add_(x)

    return AddInto


OPS: dict[str, Callable[[str], Any]] = {"mul": _mul, "mul_kw": _mul_kw, "add_into": _add_into}
DIFFERENTIABLE = ["mul", "mul_kw"]
CONTEXTS: dict[str, Callable[[], Any]] = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}
PATHS = ["MyOp", "MyOp.op"]


def _fn(cls: Any, path: str) -> Callable[..., Any]:
    fn: Callable[..., Any] = cls if path == "MyOp" else cls.op
    return fn


def _kwargs(op_name: str) -> dict[str, Any]:
    return {"k": 2.0} if op_name == "mul_kw" else {}


def _expected(op_name: str, x: Tensor, second: Tensor) -> Tensor:
    """What a good call returns (``mul``, ``mul_kw``) or writes into ``second`` (``add_into``)."""
    x, second = x.detach(), second.detach()
    return {"mul": x * second, "mul_kw": x * second * 2.0, "add_into": second + x}[op_name]


# --------------------------------------------------------------------------- helpers


def _frames(tb: Optional[types.TracebackType]) -> list[types.CodeType]:
    codes = []
    while tb is not None:
        codes.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    return codes


def _assert_user_error(e: BaseException, message: str, hook: str) -> None:
    """``e`` is the last exception a hook of this file raised, and the hook's frame is innermost."""
    assert RAISED and e is RAISED[-1], f"got {type(e).__name__}({e}), not the object the {hook} raised"
    assert type(e) is ValueError and str(e) == message
    innermost = _frames(e.__traceback__)[-1]
    assert (innermost.co_name, innermost.co_filename) == (hook, __file__), f"innermost frame: {innermost}"


def _state(t: Tensor) -> tuple[Any, ...]:
    return (t.detach().clone(), t._version, t.grad is not None, t.requires_grad, t.is_leaf)


def _assert_unchanged(before: tuple[Any, ...], t: Tensor, label: str, written: bool = False) -> None:
    """Values and autograd state as they were; the version counter moved only for a Tensor the op
    declares it writes (``written``): a kernel that raises may have written to it already."""
    after = _state(t)
    assert torch.equal(before[0], after[0]), f"{label}: values changed by a failed call"
    assert before[2:] == after[2:], f"{label}: (grad, requires_grad, is_leaf) {before[2:]} -> {after[2:]}"
    assert (after[1] > before[1]) == written, f"{label}: version {before[1]} -> {after[1]}"


# --------------------------------------------------------------------------- a raising kernel


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", list(OPS))
def test_kernel_exception_reaches_the_caller(ns: str, op_name: str, path: str, requires_grad: bool, context: str) -> None:
    cls = OPS[op_name](ns)
    fn = _fn(cls, path)
    x = torch.full((3,), -1.0, requires_grad=requires_grad)
    # The mutated Tensor never requires grad; the other input of mul does when asked.
    second = torch.arange(3.0).requires_grad_(requires_grad and op_name != "add_into")
    before = [_state(x), _state(second)]
    RAISED.clear()
    with CONTEXTS[context]():
        e = error_of(fn, x, second, **_kwargs(op_name))
    _assert_user_error(e, "boom from kernel", "cpu")
    # Nothing written, no grad; the mutated Tensor's version bumped before the kernel ran, as
    # custom_op does.
    _assert_unchanged(before[0], x, "x")
    _assert_unchanged(before[1], second, "out" if op_name == "add_into" else "y", written=op_name == "add_into")

    x_good = torch.ones(3, requires_grad=requires_grad)
    version = second._version
    with CONTEXTS[context]():
        out = fn(x_good, second, **_kwargs(op_name))
    if op_name == "add_into":
        assert out is None and torch.equal(second, _expected(op_name, x_good, before[1][0]))
        assert second._version > version, "the good call did not bump the mutated Tensor's version"
    else:
        assert torch.equal(out.detach(), _expected(op_name, x_good, second))
        assert out.requires_grad == (requires_grad and context == "grad")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", DIFFERENTIABLE)
def test_failed_forward_leaves_no_autograd_state(ns: str, op_name: str, path: str) -> None:
    cls = OPS[op_name](ns)
    fn = _fn(cls, path)
    kwargs = _kwargs(op_name)
    x = torch.full((3,), -1.0, requires_grad=True)
    y = torch.arange(1.0, 4.0, requires_grad=True)
    for _ in range(2):
        error_of(fn, x, y, **kwargs)
    assert (x.grad, y.grad) == (None, None)
    assert x.is_leaf and y.is_leaf and x.grad_fn is None and (x._version, y._version) == (0, 0)

    # No graph (node, ctx, saved tensor) outlives the failed call: its inputs can be freed.
    def failed_call_refs() -> list[weakref.ref[Tensor]]:
        a, b = torch.full((3,), -1.0, requires_grad=True), torch.ones(3, requires_grad=True)
        try:
            fn(a, b, **kwargs)
        except ValueError:
            pass
        return [weakref.ref(a), weakref.ref(b)]

    RAISED.clear()  # (they hold tracebacks, whose frames hold the inputs)
    refs = failed_call_refs()
    RAISED.clear()
    gc.collect()  # reference cycles are not leaks; what must not exist is a live reference
    assert [r() for r in refs] == [None, None], "a failed call left references to its inputs"

    # The next call and its backward give exactly the gradients of that call.
    x_good = torch.ones(3, requires_grad=True)
    fn(x_good, y, **kwargs).sum().backward()
    k = kwargs.get("k", 1.0)
    assert x_good.grad is not None and y.grad is not None
    assert torch.equal(x_good.grad, y.detach() * k) and torch.equal(y.grad, torch.full((3,), k))
    assert x.grad is None

    a = (torch.rand(3, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.rand(3, dtype=torch.float64, requires_grad=True)
    error_of(fn, -a, b, **kwargs)
    assert torch.autograd.gradcheck(lambda u, v: fn(u, v, **kwargs), (a, b))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", DIFFERENTIABLE)
def test_raising_backward(ns: str, op_name: str, path: str) -> None:
    cls = OPS[op_name](ns)
    fn = _fn(cls, path)
    kwargs = _kwargs(op_name)
    x = torch.ones(3, requires_grad=True)
    y = torch.arange(1.0, 4.0, requires_grad=True)
    out = fn(x, y, **kwargs)
    RAISED.clear()
    e = error_of(out.backward, torch.full((3,), -1.0))
    _assert_user_error(e, "boom from backward", "backward")
    assert (x.grad, y.grad) == (None, None), "a failed backward accumulated gradients"

    fn(x, y, **kwargs).backward(torch.ones(3))
    k = kwargs.get("k", 1.0)
    assert x.grad is not None and y.grad is not None
    assert torch.equal(x.grad, y.detach() * k) and torch.equal(y.grad, torch.full((3,), k))


@pytest.mark.parametrize("where", ["fake_tensor_mode", "meta"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", DIFFERENTIABLE)
def test_raising_abstract(ns: str, op_name: str, path: str, requires_grad: bool, where: str) -> None:
    cls = OPS[op_name](ns)
    fn = _fn(cls, path)
    kwargs = _kwargs(op_name)
    device = "meta" if where == "meta" else "cpu"
    with FakeTensorMode() if where == "fake_tensor_mode" else contextlib.nullcontext():
        RAISED.clear()
        bad = torch.ones(2, 2, device=device, requires_grad=requires_grad)
        e = error_of(fn, bad, torch.ones(2, 2, device=device), **kwargs)
        _assert_user_error(e, "boom from abstract", "abstract")
        assert bad.grad is None and bad._version == 0
        out = fn(torch.ones(3, device=device, requires_grad=requires_grad), torch.ones(3, device=device), **kwargs)
    assert isinstance(out, FakeTensor) == (where == "fake_tensor_mode")
    assert out.shape == (3,) and out.device.type == device and out.requires_grad == requires_grad


# --------------------------------------------------------------------------- a kernel that writes, then raises


def _write_then_raise(ns: str) -> Any:
    class Accumulate(CustomOp, name=f"{ns}::accumulate", mutates_args=("acc",)):
        @staticmethod
        def cpu(acc: Tensor, x: Tensor) -> None:
            a = acc.numpy()
            a += x.numpy()
            raise ValueError("boom after the write")

    return Accumulate


def test_a_kernel_that_writes_and_raises_counts_as_a_write(ns: str) -> None:
    op = _write_then_raise(ns)
    for label, fn in call_paths(op).items():
        acc = torch.zeros(2)
        assert isinstance(error_of(fn, acc, torch.ones(2)), ValueError)
        assert acc._version > 0, label


def test_a_saved_tensor_written_by_a_raising_kernel_is_not_used_silently(ns: str) -> None:
    """Autograd refuses a Tensor that changed after it was saved, as with custom_op."""
    op = _write_then_raise(ns)
    for label, fn in call_paths(op).items():
        w = torch.ones(2, requires_grad=True)
        acc = torch.ones(2)
        out = (w * acc).sum()  # saves acc for w's gradient
        error_of(fn, acc, torch.ones(2))
        assert "modified by an inplace operation" in str(error_of(out.backward)), label


# --------------------------------------------------------------------------- wrong kernel results


# A kernel below returns _MAKERS[how](x): the test case passes the index of its maker (an int,
# so that simple ops also take the native C entry).
_MAKERS: list[Callable[[Tensor], Any]] = []


def _ret(ns: str) -> Any:
    class Ret(CustomOp, name=f"{ns}::ret"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> Tensor:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Ret


def _ret_kw(ns: str) -> Any:
    class RetKw(CustomOp, name=f"{ns}::ret_kw"):
        @staticmethod
        def cpu(x: Tensor, *, how: int) -> Tensor:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return RetKw


def _pair(ns: str) -> Any:
    class Pair(CustomOp, name=f"{ns}::pair"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> tuple[Tensor, Tensor]:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Pair


def _tensors(ns: str) -> Any:
    class Tensors(CustomOp, name=f"{ns}::tensors"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> list[Tensor]:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Tensors


def _one_tuple(ns: str) -> Any:
    class OneTuple(CustomOp, name=f"{ns}::one_tuple"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> tuple[Tensor]:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return OneTuple


def _number(ns: str) -> Any:
    class Number(CustomOp, name=f"{ns}::number"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> float:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Number


def _nothing(ns: str) -> Any:
    class Nothing(CustomOp, name=f"{ns}::nothing"):
        @staticmethod
        def cpu(x: Tensor, how: int) -> None:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Nothing


def _scale(ns: str) -> Any:
    """The tester's op: a mutating op whose kernel returns what it wrote."""

    class Scale(CustomOp, name=f"{ns}::scale", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor, how: int) -> None:
            return _MAKERS[how](x)  # type: ignore[no-any-return]  # wrong on purpose

    return Scale


@dataclasses.dataclass
class WrongResult:
    op: Callable[[str], Any]
    make: Callable[[Tensor], Any]  # the kernel's result, from its input x = [1., 2., 3.]
    exc: Optional[type[BaseException]]  # what every path raises (None: nothing)
    says: str  # the message ("{where}" is "ns::op (Cls.cpu)"); for exc None, repr of the output


_ALIAS = "{where}: the output of this custom operator (1) must not also be an input"
_TENSOR = "but the op returns a Tensor (-> Tensor)"
WRONG_RESULTS: dict[str, WrongResult] = {
    "float_for_tensor": WrongResult(_ret, lambda x: 3.0, RuntimeError, "{where} returned the float 3.0, " + _TENSOR + ": return a Tensor (torch.tensor(3.0)), or annotate the kernels -> float if the op returns a number"),
    "int_for_tensor": WrongResult(_ret, lambda x: 3, RuntimeError, "{where} returned the int 3, " + _TENSOR + ": return a Tensor (torch.tensor(3)), or annotate the kernels -> int if the op returns a number"),
    "numpy_array_for_tensor": WrongResult(_ret, lambda x: x.detach().numpy() * 2, RuntimeError, "{where} returned a NumPy array (float32, shape (3,)), " + _TENSOR + ": convert it with torch.from_numpy(...)"),
    "numpy_scalar_for_tensor": WrongResult(_ret, lambda x: x.detach().numpy().sum(), RuntimeError, "{where} returned a NumPy float32 (6.0), " + _TENSOR + ": convert it with torch.tensor(...)"),
    "input_returned": WrongResult(_ret, lambda x: x, RuntimeError, _ALIAS),
    "view_of_input_returned": WrongResult(_ret, lambda x: x[1:], RuntimeError, _ALIAS),
    "storage_of_input_returned": WrongResult(_ret, lambda x: torch.empty(0).set_(x.untyped_storage()), RuntimeError, _ALIAS),  # no view, same storage
    "tuple_for_tensor": WrongResult(_ret, lambda x: (x * 1, x * 2), RuntimeError, "{where} returned a tuple (Tensor, Tensor), " + _TENSOR + ": return one Tensor, or declare 2 outputs: -> tuple[Tensor, Tensor]"),
    "one_tuple_for_tensor": WrongResult(_ret, lambda x: [x * 1], RuntimeError, "{where} returned a list (Tensor), " + _TENSOR + ": return the Tensor itself, not a 1-element list"),
    "tuple_with_input_for_tensor": WrongResult(_ret, lambda x: (x, x * 2), RuntimeError, "{where} returned a tuple (Tensor, Tensor), " + _TENSOR),
    # The dispatcher would make None an undefined Tensor (None again in Python): a forgotten return.
    "none_for_tensor": WrongResult(_ret, lambda x: None, RuntimeError, "{where} returned None, " + _TENSOR + ": did the kernel forget to return its result? (If None is meant, annotate Optional[Tensor].)"),
    "subclass_for_tensor": WrongResult(_ret, lambda x: torch.nn.Parameter(x.detach() * 2), None, "Parameter"),
    "keyword_only_float_for_tensor": WrongResult(_ret_kw, lambda x: 3.0, RuntimeError, "{where} returned the float 3.0, " + _TENSOR),
    "keyword_only_input_returned": WrongResult(_ret_kw, lambda x: x, RuntimeError, _ALIAS),
    "keyword_only_view_of_input_returned": WrongResult(_ret_kw, lambda x: x[1:], RuntimeError, _ALIAS),
    "keyword_only_none_for_tensor": WrongResult(_ret_kw, lambda x: None, RuntimeError, "{where} returned None, " + _TENSOR),
    "one_of_two": WrongResult(_pair, lambda x: (x * 1,), RuntimeError, "{where}: the kernel returned 1 value, but the op's schema declares 2 outputs"),
    "three_of_two_in_a_list": WrongResult(_pair, lambda x: [x * 1, x * 2, x * 3], RuntimeError, "{where}: the kernel returned 3 values, but the op's schema declares 2 outputs"),
    "bare_tensor_for_two": WrongResult(_pair, lambda x: x * 1, TypeError, "{where} returned a Tensor of shape (3,), but the op returns 2 values (-> tuple[Tensor, Tensor]): return a tuple of 2 values (return a, b), or declare one output (-> Tensor)"),
    "float_in_tuple": WrongResult(_pair, lambda x: (x * 1, 2.0), RuntimeError, "{where} returned a tuple (Tensor, float) whose item [1] is the float 2.0, but a Tensor belongs there (-> tuple[Tensor, Tensor]): return a Tensor (torch.tensor(2.0)), or annotate the kernels -> float if the op returns a number"),
    "none_in_tuple": WrongResult(_pair, lambda x: (x * 1, None), RuntimeError, "{where} returned a tuple (Tensor, None) whose item [1] is None, but a Tensor belongs there (-> tuple[Tensor, Tensor]): did the kernel forget"),
    "input_in_tuple": WrongResult(_pair, lambda x: (x * 1, x), RuntimeError, _ALIAS),
    # torch 2.13's dispatcher would crash on too many values, in a tuple as in a list.
    "three_of_two": WrongResult(_pair, lambda x: (x * 1, x * 2, x * 3), RuntimeError, "{where}: the kernel returned 3 values, but the op's schema declares 2 outputs"),
    "list_for_two": WrongResult(_pair, lambda x: [x * 1, x * 2], None, "tuple"),
    # A return type with no schema spelling of its own: the error still names the op and the hook.
    "bare_tensor_for_one_tuple": WrongResult(_one_tuple, lambda x: x * 1, RuntimeError, "{where} returned a Tensor of shape (3,), which the dispatcher cannot convert to -> tuple[Tensor]: return a value of that type"),
    "one_tuple": WrongResult(_one_tuple, lambda x: (x * 1,), None, "tuple"),
    "float_in_list": WrongResult(_tensors, lambda x: [x * 1, 2.0], RuntimeError, "{where} returned a list (Tensor, float) whose item [1] is the float 2.0, but a Tensor belongs there (-> list[Tensor]): return a Tensor (torch.tensor(2.0))"),
    "none_in_list": WrongResult(_tensors, lambda x: [None, x * 1], RuntimeError, "{where} returned a list (None, Tensor) whose item [0] is None, but a Tensor belongs there (-> list[Tensor])"),
    "bare_tensor_for_list": WrongResult(_tensors, lambda x: x * 1, RuntimeError, "{where} returned a Tensor of shape (3,), but the op returns a list of Tensors (-> list[Tensor]): return a list of Tensors ([t] for one), or annotate the kernels -> Tensor"),
    "tuple_for_list": WrongResult(_tensors, lambda x: (x * 1, x * 2), None, "list"),
    "vector_for_float": WrongResult(_number, lambda x: x * 1, RuntimeError, "{where} returned a Tensor of shape (3,), but the op returns a float (-> float): return a Python float (t.item() of a one-element Tensor or array), or annotate the kernels -> Tensor"),
    "string_for_float": WrongResult(_number, lambda x: "3.0", RuntimeError, "{where} returned the str '3.0', but the op returns a float (-> float): return a float"),
    "none_for_float": WrongResult(_number, lambda x: None, RuntimeError, "{where} returned None, but the op returns a float (-> float): did the kernel forget"),
    # What the dispatcher converts must never be refused.
    "zero_dim_tensor_for_float": WrongResult(_number, lambda x: x.detach().sum(), None, "6.0"),
    "numpy_scalar_for_float": WrongResult(_number, lambda x: x.detach().numpy().sum(), None, "6.0"),
    "int_for_float": WrongResult(_number, lambda x: 6, None, "6.0"),
    "tensor_for_none": WrongResult(_nothing, lambda x: x * 2, RuntimeError, "{where} returned a Tensor of shape (3,), but the op returns nothing (-> None): drop the return value (a kernel of a mutating op writes its inputs in place and returns None), or declare the output (e.g. -> Tensor)"),
    "float_for_none": WrongResult(_nothing, lambda x: 1.0, RuntimeError, "{where} returned the float 1.0, but the op returns nothing (-> None)"),
    "mutated_input_returned_for_none": WrongResult(_scale, lambda x: x.mul_(2), RuntimeError, "{where} returned a Tensor of shape (3,), but the op returns nothing (-> None)"),
}


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("case", list(WRONG_RESULTS))
def test_wrong_kernel_result(ns: str, case: str, requires_grad: bool, context: str) -> None:
    """Every call path raises the same error, naming the op, the class and hook, what came back,
    what the op returns and the fix; what the dispatcher converts passes on every path."""
    wrong = WRONG_RESULTS[case]
    cls = wrong.op(ns)
    how = len(_MAKERS)
    _MAKERS.append(wrong.make)
    if requires_grad and cls.record.mutated:
        requires_grad = False  # writes to a Tensor that requires grad have rules of their own (test_call_plan)
    kw_only = any(a.kwarg_only for a in cls.record.schema.arguments)
    # Every call path (the class call, the other guard's where both exist, the dispatcher).
    seen = {}
    for label, fn in call_paths(cls).items():
        x = torch.arange(1.0, 4.0, requires_grad=requires_grad)
        before = _state(x)
        with CONTEXTS[context]():
            seen[label] = observe(fn, (x,), {"how": how}) if kw_only else observe(fn, (x, how), {})
        if wrong.exc is not None and not cls.record.mutated:
            _assert_unchanged(before, x, "x")
    *fast, reference = seen
    slow = seen[reference]
    assert (slow["exception"] or (None,))[0] == (wrong.exc.__name__ if wrong.exc else None), f"the dispatcher: {slow['exception']}"
    for label in fast:
        assert diff(seen[label], slow) is None, (label, diff(seen[label], slow))
    if wrong.exc is None:
        out = slow["output"]
        shown = out["container"] if isinstance(out, dict) and "container" in out else out["type"] if isinstance(out, dict) else repr(out)
        assert shown == wrong.says, slow["output"]
    else:
        where = f"{cls.qualname} ({cls.__name__}.cpu)"
        message = slow["exception"][1]
        assert message.startswith(wrong.says.format(where=where)), message
        if wrong.says.startswith("{where} returned"):
            assert ": " in message[len(where) :], f"no fix given: {message}"


def test_wrong_result_error_is_catchable_as_runtime_error(ns: str) -> None:
    """``except RuntimeError`` keeps working, on the class call and through torch.ops."""
    cls = _ret(ns)
    how = len(_MAKERS)
    _MAKERS.append(lambda x: (x * 1, x * 2))
    for fn in (cls, getattr(getattr(torch.ops, ns), "ret")):
        with pytest.raises(RuntimeError, match=r"::ret \(Ret\.cpu\) returned a tuple \(Tensor, Tensor\)"):
            fn(torch.ones(2), how)


# --------------------------------------------------------------------------- results that keep the contract


def test_fresh_outputs_pass(ns: str) -> None:
    class Two(CustomOp, name=f"{ns}::two"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return x * 1, x * 2

    for call in (Two, Two.op):
        a, b = call(torch.ones(2))
        assert torch.equal(a, torch.ones(2)) and torch.equal(b, torch.full((2,), 2.0))


def test_functional_op_returning_a_clone_is_fine(ns: str) -> None:
    class Copy(CustomOp, name=f"{ns}::copy"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.clone()

    x = torch.ones(2)
    y = Copy(x)
    assert y is not x and y.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("requires_grad", [False, True])
def test_output_without_storage_passes(ns: str, requires_grad: bool) -> None:
    # A sparse Tensor has no storage: the cheap freshness test cannot read one, and the full
    # check decides (it used to raise "Cannot access storage" under the pure-Python guard).
    class Sparse(CustomOp, name=f"{ns}::sparse"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.detach().to_sparse()

    x = torch.tensor([0.0, 2.0, 0.0], requires_grad=requires_grad)
    for call in (Sparse, Sparse.op, Sparse, Sparse.op):
        out = call(x)
        assert out.layout == torch.sparse_coo and torch.equal(out.to_dense(), x.detach())


# --------------------------------------------------------------------------- wrong abstract results


def _bad_abstract(ns: str) -> Any:
    class BadAbstract(CustomOp, name=f"{ns}::bad_abstract"):
        @staticmethod
        def cpu(x: Tensor, how: str) -> tuple[Tensor, Tensor]:
            return x * 1, x * 2

        @staticmethod
        def abstract(x: Tensor, how: str) -> tuple[Tensor, Tensor]:
            wrong = {"float": lambda: (torch.empty_like(x), 2.0), "one": lambda: (torch.empty_like(x),)}
            return wrong[how]()  # type: ignore[no-untyped-call, return-value]  # wrong on purpose

    return BadAbstract


@pytest.mark.parametrize("how", ["float", "one"])
@pytest.mark.parametrize("where", ["fake_tensor_mode", "meta"])
def test_wrong_abstract_result_matches_the_dispatcher(ns: str, where: str, how: str) -> None:
    cls = _bad_abstract(ns)
    outcomes = []
    for fn in (cls, cls.op):
        with FakeTensorMode() if where == "fake_tensor_mode" else contextlib.nullcontext():
            e = error_of(fn, torch.ones(2, device="meta" if where == "meta" else "cpu"), how)
        outcomes.append((type(e), str(e)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] is RuntimeError
    if how == "one":  # opclass's arity check, naming the op and the hook
        assert outcomes[0][1] == f"{ns}::bad_abstract (BadAbstract.abstract): the kernel returned 1 value, but the op's schema declares 2 outputs"


def _fake_returns_input(ns: str) -> Any:
    class Op(CustomOp, name=f"{ns}::input"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.exp()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x  # should be torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.saved_tensors[0]

    return Op


def _fake_returns_one(ns: str) -> Any:
    class Op(CustomOp, name=f"{ns}::one_for_two"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return x.min(), x.max()

        @staticmethod
        def abstract(x):  # type: ignore[no-untyped-def]
            return x.new_empty(())  # should be a tuple of two

    return Op


def _fake_contexts() -> dict[str, Callable[[], Any]]:
    def fake() -> Any:
        mode = FakeTensorMode()
        return mode, lambda: mode.from_tensor(torch.ones(3)).requires_grad_()

    def meta() -> Any:
        return contextlib.nullcontext(), lambda: torch.ones(3, device="meta", requires_grad=True)

    return {"FakeTensorMode": fake, "meta": meta}


def test_a_fake_kernel_returning_its_input_gets_the_aliasing_message(ns: str) -> None:
    op = _fake_returns_input(ns)
    for context, make in _fake_contexts().items():
        mode, tensor = make()
        for label, fn in call_paths(op).items():
            with mode:
                line = first_line(error_of(fn, tensor()))
            assert line.startswith(f"{ns}::input (Op.abstract): the output of this custom operator (1) must not also be an input"), (context, label, line)


def test_a_fake_kernel_with_too_few_outputs_raises_what_eager_raises(ns: str) -> None:
    op = _fake_returns_one(ns)
    eager = error_of(op.record.outputs.finish, f"{ns}::one_for_two (Op.cpu)", (), {}, torch.ones(()))
    assert type(eager) is TypeError
    for context, make in _fake_contexts().items():
        mode, tensor = make()
        for label, fn in call_paths(op).items():
            with mode:
                e = error_of(fn, tensor())
            assert type(e) is TypeError, (context, label)
            assert first_line(e).startswith(f"{ns}::one_for_two (Op.abstract) returned a"), (context, label)
    torch._dynamo.reset()
    assert first_line(error_of(compiled_call(op), torch.ones(3))).startswith(f"{ns}::one_for_two (Op.abstract) returned a FakeTensor")


_CHILD = """
import sys
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from opclass import CustomOp

class TooMany(CustomOp, name="kernel_errors_child::too_many"):
    @staticmethod
    def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
        return x * 1, x * 2

    @staticmethod
    def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
        return torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)

for label, fn in (("MyOp", TooMany), ("MyOp.op", TooMany.op)):
    try:
        if sys.argv[1] == "meta":
            fn(torch.ones(2, device="meta"))
        else:
            with FakeTensorMode():
                fn(torch.ones(2))
        print(label, "no exception", flush=True)
    except Exception as e:
        print(label, type(e).__name__, str(e).replace(chr(10), " "), flush=True)
"""


@pytest.mark.slow
def test_abstract_returning_too_many_outputs_is_an_error_not_a_crash() -> None:
    """As for kernels (``three_of_two`` above): an ``abstract`` returning 3 values for 2 outputs must
    raise, on both call paths, not take the interpreter down (torch 2.13's dispatcher crashes on it).
    Checked with meta Tensors and under FakeTensorMode, each in a child process (run side by side)."""
    children = {
        where: subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_CHILD), where],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        for where in ("meta", "fake_tensor_mode")
    }
    results = {where: (*child.communicate(timeout=120), child.returncode) for where, child in children.items()}
    for where, (stdout, stderr, returncode) in results.items():
        assert returncode == 0, f"{where}: the child process died with {returncode}: {stderr[-2000:]}"
        lines = dict(line.split(" ", 1) for line in stdout.splitlines())
        assert lines["MyOp"] == lines["MyOp.op"] and lines["MyOp"].startswith("RuntimeError"), (where, lines)
        assert "kernel_errors_child::too_many" in lines["MyOp"], (where, lines)
