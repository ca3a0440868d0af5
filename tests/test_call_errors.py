"""Call-time errors from bad arguments: ``MyOp(...)`` reports exactly what ``MyOp.op(...)`` reports.

Four ops are called with bad arguments: a functional op with Tensor, int, float, bool, optional
Tensor and keyword-only parameters with defaults; a ``list[Tensor]`` op; a mutating op
(``mutates_args=("out",)``); and ops with a kernel for one device only (``cpu`` / ``cuda``, no
``abstract``). The bad calls: too many / too few arguments, wrong types (str for Tensor, float for
int, a Tensor for int, non-Tensors in a Tensor list...), unknown, duplicate and missing arguments,
a keyword-only argument passed positionally, ``None`` for a Tensor, a device without a kernel.

For each bad call, with plain and ``requires_grad`` inputs, with grad, under ``no_grad`` and under
``inference_mode``:

* ``MyOp(...)`` raises the exception type and message ``MyOp.op(...)`` raises (the dispatcher's),
  and the message names the op and, where the dispatcher does, the parameter;
* every input is left as it was: values and version counters (the mutating op's ``out`` above all);
* generated code in the traceback has its source registered, and an argument-type error does not
  end in a frame of opclass-generated code.

Calls with Tensors on two devices (cpu and meta) are not rejected by the dispatcher (a meta Tensor
sends the call to the op's fake kernel); both call paths must agree on whatever happens. Last,
parameter names that coincide with names inside the generated call function must not change
what a call does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import types
from typing import Any, Callable, Iterator, Optional

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp

# --------------------------------------------------------------------------- the ops


def _affine(ns: str) -> Any:
    class Affine(CustomOp, name=f"{ns}::affine"):
        @staticmethod
        def cpu(
            x: Tensor, n: int, alpha: float, flag: bool, bias: Optional[Tensor] = None, *, beta: float = 0.5, k: int = 1
        ) -> Tensor:
            out = x * alpha + n * k + beta
            if bias is not None:
                out = out + bias
            return -out if flag else out

        @staticmethod
        def abstract(x, n, alpha, flag, bias=None, *, beta=0.5, k=1):
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, keyword_only_inputs, output):
            ctx.sign = -1.0 if inputs[3] else 1.0
            ctx.alpha = inputs[2]
            ctx.has_bias = inputs[4] is not None

        @staticmethod
        def backward(ctx, grad):
            return grad * (ctx.alpha * ctx.sign), None, None, None, (grad * ctx.sign if ctx.has_bias else None)

    return Affine


def _stack_sum(ns: str) -> Any:
    class StackSum(CustomOp, name=f"{ns}::stack_sum"):
        @staticmethod
        def cpu(xs: list[Tensor], scale: float = 1.0) -> Tensor:
            return torch.stack(xs).sum(0) * scale

    return StackSum


def _add_into(ns: str) -> Any:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def cpu(x: Tensor, out: Tensor, k: int = 1) -> None:
            out.add_(x * k)

    return AddInto


def _cpu_only(ns: str) -> Any:
    class CpuOnly(CustomOp, name=f"{ns}::cpu_only"):
        """A kernel for CPU and nothing else: no ``abstract``, no ``default``."""

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    return CpuOnly


def _cuda_only(ns: str) -> Any:
    class CudaOnly(CustomOp, name=f"{ns}::cuda_only"):
        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x + 1

    return CudaOnly


OPS: dict[str, Callable[[str], Any]] = {
    "affine": _affine,
    "stack_sum": _stack_sum,
    "add_into": _add_into,
    "cpu_only": _cpu_only,
    "cuda_only": _cuda_only,
}

# --------------------------------------------------------------------------- inputs


class Inputs:
    """Builds the Tensors of one call; ``requires_grad`` applies to every Tensor made with ``grad=True``."""

    def __init__(self, requires_grad: bool) -> None:
        self.requires_grad = requires_grad

    def T(self, *shape: int, device: str = "cpu", grad: bool = True) -> Tensor:
        t = torch.arange(1.0, 1.0 + torch.Size(shape).numel()).reshape(shape).to(device)
        return t.requires_grad_() if grad and self.requires_grad else t

    def out(self, *shape: int, device: str = "cpu") -> Tensor:
        """A Tensor the mutating op writes to: never requires grad (such writes have rules of their own, tested in test_call_plan)."""
        return self.T(*shape, device=device, grad=False)


Build = Callable[[Inputs], "tuple[tuple[Any, ...], dict[str, Any]]"]


@dataclasses.dataclass
class BadCall:
    """One bad call of one op, and what the dispatcher is known to say about it."""

    op: str
    build: Build
    exc: type[BaseException]  # the dispatcher's exception type (pinned: a change is a change of behaviour)
    says: tuple[str, ...]  # text the message contains besides the op's name: the parameter, where named
    type_error: bool = False  # an argument of the wrong type: the dispatcher's argument parser rejects it
    names_op: bool = True  # False: the error comes from the user's kernel, which the dispatcher let through


def _affine_args(I: Inputs, *rest: Any, **kw: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (I.T(3), 1, 2.0, True, *rest), kw


BAD_CALLS: dict[str, BadCall] = {
    # --- the functional op with every kind of parameter
    "affine-too_many": BadCall(
        "affine", lambda I: _affine_args(I, None, 0.5, 3, 4), RuntimeError, ("expected at most 7 argument(s) but received 8",)
    ),
    "affine-keyword_only_positionally": BadCall(
        "affine", lambda I: _affine_args(I, None, 0.5), RuntimeError, ("takes 5 positional argument(s) but 6",)
    ),
    "affine-too_few": BadCall("affine", lambda I: ((I.T(3), 1), {}), RuntimeError, ("missing value for argument 'alpha'",)),
    "affine-missing_keyword": BadCall(
        "affine", lambda I: ((), {"x": I.T(3), "n": 1, "flag": False}), RuntimeError, ("missing value for argument 'alpha'",)
    ),
    "affine-no_arguments": BadCall("affine", lambda I: ((), {}), RuntimeError, ("missing value for argument 'x'",)),
    "affine-unexpected_keyword": BadCall(
        "affine", lambda I: _affine_args(I, gamma=1.0), RuntimeError, ("Unknown keyword argument 'gamma'",)
    ),
    "affine-duplicate": BadCall(
        "affine", lambda I: _affine_args(I, n=2), RuntimeError, ("Argument 'n' specified both as positional and keyword",)
    ),
    "affine-str_for_tensor": BadCall(
        "affine", lambda I: (("x", 1, 2.0, True), {}), RuntimeError, ("for argument 'x'", "found type 'str'"), type_error=True
    ),
    "affine-float_for_int": BadCall(
        "affine", lambda I: ((I.T(3), 1.5, 2.0, True), {}), RuntimeError, ("type 'int' for argument 'n'",), type_error=True
    ),
    "affine-tensor_for_int": BadCall(
        "affine",
        lambda I: ((I.T(3), I.T(3), 2.0, True), {}),
        RuntimeError,
        ("type 'int' for argument 'n'", "found type 'Tensor'"),
        type_error=True,
    ),
    "affine-str_for_float": BadCall(
        "affine", lambda I: ((I.T(3), 1, "2.0", True), {}), RuntimeError, ("type 'float' for argument 'alpha'",), type_error=True
    ),
    "affine-str_for_bool": BadCall(
        "affine", lambda I: ((I.T(3), 1, 2.0, "yes"), {}), RuntimeError, ("type 'bool' for argument 'flag'",), type_error=True
    ),
    "affine-str_for_optional_tensor": BadCall(
        "affine", lambda I: _affine_args(I, bias="b"), RuntimeError, ("for argument 'bias'",), type_error=True
    ),
    "affine-float_for_keyword_only_int": BadCall(
        "affine", lambda I: _affine_args(I, k=2.5), RuntimeError, ("type 'int' for argument 'k'",), type_error=True
    ),
    # None for the only Tensor: the dispatcher takes it as "no Tensor arguments".
    "affine-none_for_tensor": BadCall(
        "affine", lambda I: ((None, 1, 2.0, True), {}), NotImplementedError, ("There were no tensor arguments",)
    ),
    # None for a Tensor next to another Tensor: the dispatcher hands None to the kernel, which fails.
    "affine-none_for_tensor_beside_a_tensor": BadCall(
        "affine", lambda I: ((None, 1, 2.0, True, I.T(3)), {}), TypeError, ("NoneType",), names_op=False
    ),
    # --- the Tensor-list op
    "stack_sum-ints_for_tensor_list": BadCall(
        "stack_sum", lambda I: (([1, 2],), {}), RuntimeError, ("type 'List[Tensor]' for argument 'xs'",), type_error=True
    ),
    "stack_sum-tensor_and_int_in_list": BadCall(
        "stack_sum", lambda I: (([I.T(3), 1],), {}), RuntimeError, ("type 'List[Tensor]' for argument 'xs'",), type_error=True
    ),
    "stack_sum-none_in_list": BadCall(
        "stack_sum", lambda I: (([I.T(3), None],), {}), RuntimeError, ("type 'List[Tensor]' for argument 'xs'",), type_error=True
    ),
    "stack_sum-tensor_for_list": BadCall(
        "stack_sum",
        lambda I: ((I.T(3),), {}),
        RuntimeError,
        ("type 'List[Tensor]' for argument 'xs'", "found type 'Tensor'"),
        type_error=True,
    ),
    "stack_sum-str_for_float": BadCall(
        "stack_sum", lambda I: (([I.T(3)], "2"), {}), RuntimeError, ("type 'float' for argument 'scale'",), type_error=True
    ),
    "stack_sum-too_many": BadCall(
        "stack_sum", lambda I: (([I.T(3)], 1.0, 2.0), {}), RuntimeError, ("expected at most 2 argument(s) but received 3",)
    ),
    "stack_sum-empty_list": BadCall("stack_sum", lambda I: (([],), {}), NotImplementedError, ("There were no tensor arguments",)),
    "stack_sum-meta_list": BadCall(
        "stack_sum", lambda I: (([I.T(3, device="meta")],), {}), RuntimeError, ("has no fake kernel", "define StackSum.abstract")
    ),
    # --- the mutating op: nothing may be written, no version bumped
    "add_into-float_for_int": BadCall(
        "add_into", lambda I: ((I.T(3), I.out(3), 1.5), {}), RuntimeError, ("type 'int' for argument 'k'",), type_error=True
    ),
    "add_into-tensor_for_int": BadCall(
        "add_into", lambda I: ((I.T(3), I.out(3), I.T(3)), {}), RuntimeError, ("type 'int' for argument 'k'",), type_error=True
    ),
    "add_into-str_for_mutated_tensor": BadCall(
        "add_into", lambda I: ((I.T(3), "out"), {}), RuntimeError, ("for argument 'out'",), type_error=True
    ),
    "add_into-str_for_input_tensor": BadCall(
        "add_into", lambda I: (("x", I.out(3)), {}), RuntimeError, ("for argument 'x'",), type_error=True
    ),
    "add_into-missing_mutated": BadCall("add_into", lambda I: ((I.T(3),), {}), RuntimeError, ("missing value for argument 'out'",)),
    "add_into-too_many": BadCall(
        "add_into", lambda I: ((I.T(3), I.out(3), 1, 2), {}), RuntimeError, ("expected at most 3 argument(s) but received 4",)
    ),
    "add_into-unexpected_keyword": BadCall(
        "add_into", lambda I: ((I.T(3), I.out(3)), {"alpha": 1}), RuntimeError, ("Unknown keyword argument 'alpha'",)
    ),
    "add_into-none_for_mutated_tensor": BadCall(
        "add_into", lambda I: ((I.T(3), None), {}), AttributeError, ("'NoneType' object has no attribute 'add_'",), names_op=False
    ),
    # --- devices without a kernel
    "cpu_only-meta_tensor": BadCall(
        "cpu_only", lambda I: ((I.T(3, device="meta"),), {}), RuntimeError, ("has no fake kernel", "define CpuOnly.abstract")
    ),
    "cpu_only-str_for_tensor": BadCall(
        "cpu_only", lambda I: (("x",), {}), RuntimeError, ("for argument 'x'",), type_error=True
    ),
    "cpu_only-too_many": BadCall(
        "cpu_only", lambda I: ((I.T(3), I.T(3)), {}), RuntimeError, ("expected at most 1 argument(s) but received 2",)
    ),
    "cuda_only-cpu_tensor": BadCall(
        "cuda_only", lambda I: ((I.T(3),), {}), NotImplementedError, ("has no kernel for cpu tensors (it has CudaOnly.cuda): define CudaOnly.cpu, or CudaOnly.default",)
    ),
}

CONTEXTS: dict[str, Callable[[], Any]] = {
    "grad": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}

# --------------------------------------------------------------------------- helpers


@dataclasses.dataclass
class Outcome:
    """What one call did: its exception (or output) and the state of its inputs before and after."""

    exc_type: Optional[type[BaseException]]
    message: Optional[str]
    traceback: Optional[types.TracebackType]
    output: Any  # the output's metadata
    values: Any  # the output's values (None for meta Tensors and non-Tensors)
    before: list[Any]
    after: list[Any]


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _state(t: Tensor) -> Any:
    """Values (not for meta Tensors), version counter, whether it has a grad, autograd metadata."""
    values = None if t.is_meta else t.detach().clone()
    return (values, t._version, t.is_leaf and t.grad is not None, t.requires_grad, t.is_leaf)


def _same_state(a: Any, b: Any) -> bool:
    (va, *ra), (vb, *rb) = a, b
    if (va is None) != (vb is None) or ra != rb:
        return False
    return va is None or torch.equal(va, vb)


def _describe(out: Any) -> Any:
    if isinstance(out, Tensor):
        return (type(out).__name__, out.device.type, tuple(out.shape), out.dtype, out.requires_grad, out.is_inference())
    return out


def call(fn: Callable[..., Any], build: Build, requires_grad: bool, context: str) -> Outcome:
    """``fn(*args, **kwargs)`` on freshly built inputs inside ``context``; never raises."""
    args, kwargs = build(Inputs(requires_grad))
    inputs = list(_tensors((args, kwargs)))
    before = [_state(t) for t in inputs]
    exc: Optional[BaseException] = None
    out: Any = None
    with CONTEXTS[context]():
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every exception is the subject here
            exc = e
    after = [_state(t) for t in inputs]
    if exc is None:
        values = out.tolist() if isinstance(out, Tensor) and not out.is_meta else None
        return Outcome(None, None, None, _describe(out), values, before, after)
    return Outcome(type(exc), str(exc), exc.__traceback__, None, None, before, after)


def _frames(tb: Optional[types.TracebackType]) -> list[types.FrameType]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _generated(frame: types.FrameType) -> bool:
    """A frame of opclass-generated code (``compile_function``'s ``<opclass generated ...>`` filename)."""
    return frame.f_code.co_filename.startswith("<opclass")


# --------------------------------------------------------------------------- bad calls


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_call_raises_what_the_dispatcher_raises(ns: str, case: str, requires_grad: bool, context: str) -> None:
    bad = BAD_CALLS[case]
    cls = OPS[bad.op](ns)
    fast = call(cls, bad.build, requires_grad, context)
    slow = call(cls.op, bad.build, requires_grad, context)

    assert slow.exc_type is bad.exc, f"the dispatcher raised {slow.exc_type} ({slow.message}), expected {bad.exc}"
    assert (fast.exc_type, fast.message) == (slow.exc_type, slow.message)
    assert fast.message is not None
    if bad.names_op:
        assert cls.qualname in fast.message
    for text in bad.says:
        assert text in fast.message, f"{text!r} not in {fast.message!r}"
    for label, outcome in (("MyOp(...)", fast), ("MyOp.op(...)", slow)):
        for i, (b, a) in enumerate(zip(outcome.before, outcome.after)):
            assert _same_state(b, a), f"{label}: input Tensor #{i} changed (values, version, grad) by a failed call"


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_generated_frames_in_a_traceback_show_their_source(ns: str, case: str) -> None:
    """Wherever an error passes through the generated call function, its frame has source lines."""
    bad = BAD_CALLS[case]
    fast = call(OPS[bad.op](ns), bad.build, False, "grad")
    assert fast.traceback is not None
    for frame in _frames(fast.traceback):
        if _generated(frame):
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            assert line.strip(), f"no source for {frame.f_code.co_filename}:{frame.f_lineno}"


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_traceback_ends_in_the_dispatcher_or_the_kernel(ns: str, case: str) -> None:
    """No bad call fails in generated code's own logic. The innermost Python frame is the kernel,
    torch's own code, or the generated function's line that hands the arguments to the dispatcher
    (``return _op(...)``: by design, an argument error raised by the dispatcher's C++ shows that
    call, as calling ``MyOp.op(...)`` shows the caller's line)."""
    bad = BAD_CALLS[case]
    cls = OPS[bad.op](ns)
    outcome = call(cls, bad.build, False, "grad")
    frames = _frames(outcome.traceback)
    assert frames, "no traceback"
    innermost = frames[-1]
    if _generated(innermost):
        line = linecache.getline(innermost.f_code.co_filename, innermost.f_lineno).strip()
        assert line.startswith("return _op("), f"{case}: the error comes from generated code: {line!r}"


# Names the generated call function also uses (closure variables and locals), and the guard
# whose generated code uses them.
_COLLIDING: dict[str, Optional[str]] = {
    "_op": None,  # the OpOverload's C callable: every call that falls back to the dispatcher
    "_out": None,  # the kernel's result
    "_fresh": None,  # the cheap output check
    "_g": "native",  # the native guard's verdict
    "_ks": "python",  # the Python guard's key set of the first Tensor
    "_grad": "python",  # the Python guard's grad-mode check
}


def _colliding_params() -> list[Any]:
    return [pytest.param(name, id=name) for name in _COLLIDING]


@pytest.mark.parametrize("param", _colliding_params())
def test_parameter_names_do_not_collide_with_generated_code(ns: str, param: str) -> None:
    """An op whose second parameter is named like a variable of the generated call function: good
    calls (cpu, meta, with and without grad) and a bad call behave as through ``MyOp.op``."""
    scope: dict[str, Any] = {"CustomOp": CustomOp, "Tensor": Tensor}
    exec(  # noqa: S102 - the parameter name is the subject of the test
        f"class Uses(CustomOp, name='{ns}::uses{param}'):\n"
        f"    @staticmethod\n"
        f"    def cpu(x: Tensor, {param}: Tensor) -> Tensor:\n"
        f"        return (x + 2 * {param}).view(-1)  # a view of a fresh Tensor: allowed\n"
        f"    @staticmethod\n"
        f"    def abstract(x, {param}):\n"
        f"        return torch.empty_like(x).view(-1)\n",
        {**scope, "torch": torch},
        scope,
    )
    cls = scope["Uses"]
    builds: dict[str, Build] = {
        "cpu": lambda I: ((I.T(3), I.T(3) * 10), {}),
        "meta": lambda I: ((I.T(3, device="meta"), I.T(3, device="meta")), {}),
        "str_for_tensor": lambda I: (("x", I.T(3)), {}),
    }
    for requires_grad in (False, True):
        for label, build in builds.items():
            fast = call(cls, build, requires_grad, "grad")
            slow = call(cls.op, build, requires_grad, "grad")
            assert slow.exc_type is (RuntimeError if label == "str_for_tensor" else None), slow.message
            fast_result = (fast.exc_type, fast.message, fast.output, fast.values)
            assert fast_result == (slow.exc_type, slow.message, slow.output, slow.values), (label, requires_grad)
    assert call(cls, builds["cpu"], False, "grad").values == [21.0, 42.0, 63.0]  # x + 2 * (10 * x)
