"""Debug mode (``OPCLASS_DEBUG=1`` when an op is defined): a kernel that writes to an input not in
``mutates_args`` (even through NumPy, where no version counter moves) or whose fake kernel disagrees
with what it returned raises on every call path; declared writes and agreeing fake kernels pass;
ops defined without it are unwrapped (nothing to pay). A user's dispatch mode never sees the checks;
a body's write is caught under torch.compile; switched on after ops were defined, it says so once."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import opclass
from opclass import CustomOp
from opclass._harness import call_paths, diff, observe

from _errors import compiled_call, error_of, first_line
from _ops import numpy_doubler


def _scale(ns: str, mutates: tuple[str, ...] = ()) -> Any:
    class Scale(CustomOp, name=f"{ns}::scale", mutates_args=mutates):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, gain: float) -> Tensor:
            x.mul_(gain)
            return y * gain

    return Scale


@pytest.fixture
def debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "1")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("context", ["grad", "no_grad"])
def test_undeclared_write_raises_on_every_path(ns: str, debug: None, requires_grad: bool, context: str) -> None:
    cls = _scale(ns)
    assert "fast path: cpu" in repr(cls.record)  # debug mode keeps the fast path: it runs the check too
    seen = {}
    for label, fn in call_paths(cls).items():
        with torch.no_grad() if context == "no_grad" else torch.enable_grad():
            seen[label] = observe(fn, (torch.ones(3), torch.ones(3, requires_grad=requires_grad), 2.0), {})
    *fast, reference = seen
    for label in fast:
        assert diff(seen[label], seen[reference]) is None, (label, diff(seen[label], seen[reference]))
    assert seen[reference]["exception"] == (
        "RuntimeError",
        f"{ns}::scale (Scale.cpu) wrote to 'x' (its version counter moved), but the op does not declare that it mutates 'x', "
        "so torch.compile, autograd and functionalization assume it is unchanged: add mutates_args=('x',) to the class "
        "statement (class Scale(CustomOp, ..., mutates_args=('x',))), or write to a copy instead (x = x.clone() first)",
    )


def test_declared_write_passes(ns: str, debug: None) -> None:
    cls = _scale(ns, mutates=("x",))
    x = torch.ones(3)
    out = cls(x, torch.ones(3), 2.0)
    assert torch.equal(x, torch.full((3,), 2.0)) and torch.equal(out, torch.full((3,), 2.0))
    assert x._version == 2  # the kernel's write and the op's declared bump


def test_inference_tensors_are_not_watched(ns: str, debug: None) -> None:
    cls = _scale(ns)
    with torch.inference_mode():
        x = torch.ones(3)
        cls(x, torch.ones(3), 2.0)  # no version counter to read: nothing to report
    assert torch.equal(x, torch.full((3,), 2.0))


def test_off_by_default(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPCLASS_DEBUG", raising=False)
    cls = _scale(ns)
    kernel = cls.record.kernel_for("cpu")
    assert kernel.user is cls.__dict__["cpu"].__func__  # the user's function itself: no wrapper
    x = torch.ones(3)
    cls(x, torch.ones(3), 2.0)  # silently wrong, as without opclass; opclass.testing reports it
    assert x._version == 1


def test_zero_means_off(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "0")
    cls = _scale(ns)
    kernel = cls.record.kernel_for("cpu")
    assert kernel.user is cls.__dict__["cpu"].__func__  # the user's function itself: no wrapper, as when unset
    x = torch.ones(3)
    cls(x, torch.ones(3), 2.0)  # the undeclared write is not reported
    assert torch.equal(x, torch.full((3,), 2.0)) and x._version == 1


def test_an_alias_of_a_declared_argument_is_not_reported(ns: str, debug: None) -> None:
    """A view of the declared argument shares its version counter: the declared write moves it."""

    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def cpu(out: Tensor, x: Tensor) -> None:
            out.add_(x)

    base = torch.ones(4)
    AddInto(base, base[:4])
    AddInto.op(base, base)
    assert torch.equal(base, torch.full((4,), 4.0))


# --------------------------------------------------------------------------- writes torch cannot see


def _every_path(op: Any) -> dict[str, Callable[..., Any]]:
    """The eager call paths and a compiled graph calling the op (at its run time)."""
    return {**call_paths(op), "compiled": compiled_call(op)}


def test_a_write_through_numpy_is_caught_in_debug_mode(ns: str, debug: None) -> None:
    op = numpy_doubler(ns)
    for label, fn in _every_path(op).items():
        torch._dynamo.reset()
        line = first_line(error_of(fn, torch.ones(3)))
        assert line.startswith(f"{ns}::double (Double.cpu) wrote to 'x' (its values changed, though its version counter did not"), (label, line)
        assert "add mutates_args=('x',) to the class statement" in line, label


def test_values_of_undeclared_arguments_may_stay_nan(ns: str, debug: None) -> None:
    class Keep(CustomOp, name=f"{ns}::keep"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

    x = torch.tensor([float("nan"), 1.0])
    for fn in call_paths(Keep).values():
        assert torch.equal(fn(x)[1:], torch.tensor([2.0]))


# --------------------------------------------------------------------------- the fake kernel agrees with the kernel


def _fake_mismatch(ns: str, kind: str) -> Any:
    class Op(CustomOp, name=f"{ns}::{kind}"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            if kind == "shape":
                return x[:2].clone()
            if kind == "dtype":
                return x.double()
            if kind == "argsort":
                return torch.argsort(x, dim=-1)
            # NumPy keeps the transposed layout of its result.
            return torch.from_numpy(np.asfortranarray(x.numpy() * 2))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x, dtype=torch.float32) if kind != "layout" else torch.empty_like(x, memory_format=torch.contiguous_format)

    return Op


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("shape", "shape (3, 4) from the fake kernel, (2, 4) from the kernel"),
        ("dtype", "dtype torch.float32 from the fake kernel, torch.float64 from the kernel"),
        ("argsort", "dtype torch.float32 from the fake kernel, torch.int64 from the kernel"),
        ("layout", "strides (4, 1) from the fake kernel, (1, 3) from the kernel (shape (3, 4))"),
    ],
)
def test_a_fake_kernel_that_disagrees_with_the_kernel_is_caught_in_debug_mode(ns: str, debug: None, kind: str, says: str) -> None:
    op = _fake_mismatch(ns, kind)
    for label, fn in _every_path(op).items():
        torch._dynamo.reset()
        e = error_of(fn, torch.randn(3, 4))
        line = first_line(e)
        assert type(e) is RuntimeError, (label, type(e))
        assert line.startswith(f"{ns}::{kind} (Op.abstract): the fake kernel disagrees with {ns}::{kind} (Op.cpu): {says}"), (label, line)
        assert "called with x=Tensor(shape=(3, 4), dtype=torch.float32, device=cpu, stride=(4, 1))" in line
        assert "make it build outputs exactly as the kernel returns them" in line


def test_a_fake_kernel_that_agrees_passes_debug_mode(ns: str, debug: None) -> None:
    class Rows(CustomOp, name=f"{ns}::rows"):
        @staticmethod
        def cpu(x: Tensor, n: int) -> tuple[Tensor, Tensor]:
            return x[:n].t().contiguous().t(), x.sum(0)  # a transposed layout the fake promises too

        @staticmethod
        def abstract(x: Tensor, n: int) -> tuple[Tensor, Tensor]:
            return x.new_empty(x.shape[1], n).t(), x.new_empty(x.shape[1])

    for fn in _every_path(Rows).values():
        out = fn(torch.randn(3, 4), 2)
        assert out[0].shape == (2, 4) and out[0].stride() == (1, 2)


def test_a_data_dependent_fake_kernel_passes_debug_mode(ns: str, debug: None) -> None:
    class NonZero(CustomOp, name=f"{ns}::nonzero"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.stack(np.nonzero(x.numpy()), axis=1).astype(np.int64))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.int64)

    for fn in call_paths(NonZero).values():
        assert fn(torch.tensor([0.0, 1.0, 2.0])).tolist() == [[1], [2]]


# --------------------------------------------------------------------------- the switch, bodies, one message


@pytest.mark.parametrize("value", ["", "0", "false", "False", "off", "no", " OFF "])
def test_the_switch_off_as_people_write_it(ns: str, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", value)
    cls = _scale(ns)
    assert cls.record.kernel_for("cpu").user is cls.__dict__["cpu"].__func__  # no wrapper
    assert "debug mode" not in repr(cls.record)


@pytest.mark.parametrize("value", ["1", "true", "True", "yes", "on", " ON "])
def test_the_switch_on_as_people_write_it_and_the_record_says_so(ns: str, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", value)
    cls = _scale(ns)
    assert "; debug mode (OPCLASS_DEBUG)" in repr(cls.record)
    with pytest.raises(RuntimeError, match=r"\(Scale.cpu\) wrote to 'x'"):
        cls(torch.ones(3), torch.ones(3), 2.0)


def test_a_switch_it_cannot_read_is_refused(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "maybe")
    with pytest.raises(ValueError, match=r"^OPCLASS_DEBUG='maybe' is not a switch: set it to 1 \(or true, yes, on\) for debug mode"):
        _scale(ns)
    assert not hasattr(getattr(torch.ops, ns), "scale")


def _writing_body(ns: str, hook: str, how: str) -> Any:
    def body(x: Tensor) -> Tensor:
        if how == "numpy":
            x.detach().numpy()[0] = 5.0  # no version counter moves
        else:
            x.add_(1)
        return x * 2

    return type("Body", (CustomOp,), {hook: staticmethod(body)}, name=f"{ns}::body_{hook}_{how}")


@pytest.mark.parametrize("how", ["numpy", "in_place"])
@pytest.mark.parametrize("hook", ["composite", "autograd"])
def test_an_undeclared_write_in_a_body_is_caught(ns: str, debug: None, hook: str, how: str) -> None:
    op = _writing_body(ns, hook, how)
    assert "debug mode" in repr(op.record)
    for label, fn in call_paths(op).items():
        line = first_line(error_of(fn, torch.ones(3)))
        assert line.startswith(f"{ns}::body_{hook}_{how} (Body.{hook}) wrote to 'x'"), (label, line)
        assert "add mutates_args=('x',) to the class statement" in line, label


def test_a_body_passes_debug_mode_when_it_writes_nothing(ns: str, debug: None) -> None:
    class Square(CustomOp, name=f"{ns}::square"):
        @staticmethod
        def composite(x: Tensor) -> Tensor:
            return x * x

    leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    Square(leaf).sum().backward()
    assert leaf.grad is not None and torch.equal(leaf.grad, torch.tensor([2.0, 4.0]))
    assert torch.equal(torch.vmap(Square)(torch.ones(2, 3)), torch.ones(2, 3))
    assert torch.equal(torch.vmap(torch.func.grad(lambda t: Square(t).sum()))(torch.ones(2, 3)), torch.full((2, 3), 2.0))
    compiled = torch.compile(lambda t: Square(t), backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(torch.full((2,), 3.0)), torch.full((2,), 9.0))


def test_the_class_call_and_torch_ops_give_one_message_with_defaults_left_out(ns: str, debug: None) -> None:
    class Pad(CustomOp, name=f"{ns}::pad"):
        @staticmethod
        def cpu(x: Tensor, n: int = 2, *, fill: float = 0.0) -> Tensor:
            return torch.cat([x, x.new_full((n,), fill)])

        @staticmethod
        def abstract(x: Tensor, n: int = 2, *, fill: float = 0.0) -> Tensor:
            return x.new_empty(x.shape[0] + 1)  # wrong: ignores n

    lines = {label: first_line(error_of(fn, torch.ones(3))) for label, fn in call_paths(Pad).items()}
    assert len(set(lines.values())) == 1, lines
    assert "called with x=Tensor(shape=(3,), dtype=torch.float32, device=cpu, stride=(1,)), n=2, fill=0.0" in next(iter(lines.values()))


@pytest.mark.parametrize("result", ["none", "one_tensor"])
def test_a_wrong_result_gets_the_contracts_error_in_debug_mode_too(ns: str, monkeypatch: pytest.MonkeyPatch, result: str) -> None:
    def define(name: str) -> Any:
        class Split(CustomOp, name=f"{ns}::{name}"):
            @staticmethod
            def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
                return None if result == "none" else x.clone()  # type: ignore[return-value]

            @staticmethod
            def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
                return torch.empty_like(x), torch.empty_like(x)

        return Split

    monkeypatch.setenv("OPCLASS_DEBUG", "0")
    plain = {label: error_of(fn, torch.ones(2)) for label, fn in call_paths(define("plain")).items()}
    monkeypatch.setenv("OPCLASS_DEBUG", "1")
    debugged = {label: error_of(fn, torch.ones(2)) for label, fn in call_paths(define("debugged")).items()}
    for (label, off), on in zip(plain.items(), debugged.values()):
        assert type(on) is type(off) is TypeError, (label, type(off), type(on))
        assert first_line(on) == first_line(off).replace("::plain", "::debugged"), label
        assert f"{ns}::debugged (Split.cpu)" in first_line(on), label


# --------------------------------------------------------------------------- invisible to the user's modes, compiled bodies, a late switch


class _Logged(TorchDispatchMode):
    """A user's dispatch mode: the functions it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.funcs: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.funcs.append(str(func))
        return func(*args, **(kwargs or {}))


def _seen(fn: Callable[..., Any], *args: Any) -> list[str]:
    with _Logged() as mode:
        fn(*args)
    return mode.funcs


def _checked_op(ns: str, name: str, hook: str) -> Any:
    def body(x: Tensor) -> Tensor:
        return x * 2

    hooks: dict[str, Any] = {hook: staticmethod(body)}
    if hook == "provider":  # debug mode compares it with the reference too
        hooks = {"default": staticmethod(body), "twice": opclass.provider("cpu")(staticmethod(lambda x: x + x))}
    return type("Op", (CustomOp,), hooks, name=f"{ns}::{name}")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("hook", ["cpu", "provider", "composite", "autograd"])
def test_a_dispatch_mode_sees_what_it_sees_without_debug_mode(ns: str, monkeypatch: pytest.MonkeyPatch, hook: str, requires_grad: bool) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "0")
    plain = _checked_op(ns, "plain", hook)
    monkeypatch.setenv("OPCLASS_DEBUG", "1")
    debugged = _checked_op(ns, "debugged", hook)
    assert "debug mode" in repr(debugged.record)
    for (label, off), on in zip(call_paths(plain).items(), call_paths(debugged).values()):
        x = torch.ones(3, requires_grad=requires_grad)
        assert _seen(on, x) == [f.replace(".plain.", ".debugged.") for f in _seen(off, x)], label


def test_the_write_check_of_a_tensor_with_history_is_invisible_to_a_dispatch_mode(ns: str) -> None:
    class Maybe(CustomOp, name=f"{ns}::maybe", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor, n: int) -> None:
            if n:
                x.mul_(n)

    for label, fn in call_paths(Maybe).items():
        x = torch.ones(3, requires_grad=True) * 1  # with history: the op checks it was not written
        assert _seen(fn, x, 0) == [f"{ns}.maybe.default"], label


@pytest.mark.parametrize("hook", ["composite", "autograd"])
def test_an_undeclared_write_in_a_body_is_caught_under_compile(ns: str, debug: None, hook: str) -> None:
    op = _writing_body(ns, hook, "in_place")
    torch._dynamo.reset()
    x = torch.ones(3)
    text = str(error_of(compiled_call(op), x))  # while tracing (the graph runs none of opclass's code), in Dynamo's words
    assert f"{ns}::body_{hook}_in_place (Body.{hook}) wrote to 'x' (its version counter moved)" in text, text
    assert "add mutates_args=('x',) to the class statement" in text and torch.equal(x, torch.ones(3))


def test_a_body_that_writes_what_it_declares_through_a_view_passes_under_compile(ns: str, debug: None) -> None:
    class Bump(CustomOp, name=f"{ns}::bump", mutates_args=("x",)):
        @staticmethod
        def composite(x: Tensor, y: Tensor) -> Tensor:
            x.add_(1)
            return y * 2

    torch._dynamo.reset()
    x = torch.ones(3)
    assert torch.equal(compiled_call(Bump)(x, x[:2]), torch.full((2,), 4.0)) and torch.equal(x, torch.full((3,), 2.0))


def test_debug_mode_switched_on_after_ops_were_defined_warns_once(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from opclass.builtin_hooks import debug as debug_module

    monkeypatch.setattr(debug_module, "_warned", False, raising=False)
    monkeypatch.setenv("OPCLASS_DEBUG", "0")
    _scale(ns)
    gone = _checked_op(ns, "gone", "cpu")
    opclass.remove(gone)
    monkeypatch.setenv("OPCLASS_DEBUG", "1")
    with pytest.warns(UserWarning, match="OPCLASS_DEBUG") as caught:
        _checked_op(ns, "late", "cpu")
    (warning,) = caught
    message = str(warning.message)
    assert warning.filename == __file__  # the class statement that switched it on
    assert f"{ns}::late is defined in debug mode (OPCLASS_DEBUG), but " in message and f"{ns}::scale" in message
    assert f"{ns}::gone" not in message and "set OPCLASS_DEBUG before the library that defines them is imported" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _checked_op(ns, "later", "composite")  # said once
