"""Plausible mistakes of a new user are reported, never silent: the first line of the message
names the op (or class) and the hook, and says the fix. Each test runs every call path that
applies (the class call under the native and the Python guard, ``torch.ops``, compiled graphs)."""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

import numpy as np
import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

import opclass
import opclass.testing
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths


@pytest.fixture
def debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "1")


def _error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> BaseException:
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception is the subject
        return e
    raise AssertionError(f"{fn} raised nothing")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0]


def _compiled(op: Any) -> Callable[..., Any]:
    return torch.compile(lambda *args: op(*args), backend="aot_eager", fullgraph=True)


def _every_path(op: Any) -> dict[str, Callable[..., Any]]:
    """The eager call paths and a compiled graph calling the op (at its run time)."""
    return {**call_paths(op), "compiled": _compiled(op)}


# --------------------------------------------------------------------------- 1. undeclared writes


def _numpy_doubler(ns: str) -> Any:
    class Double(CustomOp, name=f"{ns}::double"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            a = x.numpy()
            a *= 2  # a write torch cannot see: no version counter moves
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    return Double


def test_a_write_through_numpy_is_caught_in_debug_mode(ns: str, debug: None) -> None:
    op = _numpy_doubler(ns)
    for label, fn in _every_path(op).items():
        torch._dynamo.reset()
        line = _first_line(_error(fn, torch.ones(3)))
        assert line.startswith(f"{ns}::double (Double.cpu) wrote to 'x' (its values changed, though its version counter did not"), (label, line)
        assert "add mutates_args=('x',) to the class statement" in line, label


def test_check_op_catches_a_write_through_numpy(ns: str) -> None:
    op = _numpy_doubler(ns)
    e = _error(opclass.testing.check_op, op, [(torch.ones(3),)], opcheck=False, gradcheck=False)
    assert f"{ns}::double (Double.cpu) wrote to 'x' (its values changed" in str(e)
    assert "mutates_args=('x',)" in str(e)


def test_values_of_undeclared_arguments_may_stay_nan(ns: str, debug: None) -> None:
    class Keep(CustomOp, name=f"{ns}::keep"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

    x = torch.tensor([float("nan"), 1.0])
    for fn in call_paths(Keep).values():
        assert torch.equal(fn(x)[1:], torch.tensor([2.0]))


# --------------------------------------------------------------------------- 2. fake vs real


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
        e = _error(fn, torch.randn(3, 4))
        line = _first_line(e)
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


# --------------------------------------------------------------------------- 3, 4. tracing errors said first


def _numpy_sin(ns: str) -> Any:
    class NpSin(CustomOp, name=f"{ns}::np_sin"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.sin(x.numpy()))

    return NpSin


class _Call(torch.nn.Module):
    def __init__(self, op: Any) -> None:
        super().__init__()
        self.op = op

    def forward(self, *args: Any) -> Any:
        return self.op(*args)


def test_no_fake_kernel_is_the_first_line_under_compile_and_export(ns: str) -> None:
    op = _numpy_sin(ns)
    expected = f"{ns}::np_sin has no fake kernel, which torch.compile, torch.export and FakeTensor need: define NpSin.abstract"
    torch._dynamo.reset()
    assert _first_line(_error(_compiled(op), torch.ones(3))).startswith(expected)
    assert _first_line(_error(torch.export.export, _Call(op), (torch.ones(3),))).startswith(expected)
    # Without fullgraph, the op runs eagerly in its own graph break, as an op torch cannot fake does.
    torch._dynamo.reset()
    assert torch.allclose(torch.compile(lambda x: op(x) + 1, backend="aot_eager")(torch.ones(3)), torch.ones(3).sin() + 1)


def test_a_fake_kernel_that_reads_values_names_the_hook(ns: str) -> None:
    class Head(CustomOp, name=f"{ns}::head"):
        @staticmethod
        def cpu(x: Tensor, n: Tensor) -> Tensor:
            return x[: int(n.item())].clone()

        @staticmethod
        def abstract(x: Tensor, n: Tensor) -> Tensor:
            return x.new_empty(int(n.item()))

    e = _error(torch.export.export, _Call(Head), (torch.randn(5), torch.tensor(3)))
    line = _first_line(e)
    assert line.startswith(f"{ns}::head (Head.abstract): the fake kernel reads a Tensor's values"), line
    assert "torch.library.get_ctx().new_dynamic_size()" in line
    # torch.compile: its backend error comes first ("backend='aot_eager' raised:"), then this line.
    torch._dynamo.reset()
    text = str(_error(_compiled(Head), torch.randn(5), torch.tensor(3)))
    assert f"{ns}::head (Head.abstract): the fake kernel reads a Tensor's values" in text.splitlines()[1]


# --------------------------------------------------------------------------- 5. gradients for non-Tensors


def test_a_gradient_for_a_float_argument_names_the_argument(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, alpha: float) -> Tensor:
            return x * alpha

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.alpha = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.alpha, grad.sum()  # the second is wrong: alpha is a float

    for label, fn in call_paths(Scale).items():
        out = fn(torch.ones(2, requires_grad=True), 2.0)
        line = _first_line(_error(out.sum().backward))
        assert line == (
            f"{ns}::scale (Scale.backward) returned a gradient for 'alpha' (gradient 2 of 2), which is float, not a Tensor: return None for 'alpha'"
        ), label


# --------------------------------------------------------------------------- 6, 7. definition mistakes


def test_a_vmap_rule_needs_the_defaults_the_schema_has() -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Mul(CustomOp, name="t_mistakes_vmap::mul"):
            @staticmethod
            def default(x: Tensor, k: float = 1.0) -> Tensor:
                return x * k

            @staticmethod
            def vmap(info: Any, in_dims: Any, x: Tensor, k: float) -> Any:
                return Mul(x, k), in_dims[0]

    assert str(info.value) == (
        "Mul.vmap(info: Any, in_dims: Any, x: Tensor, k: float) -> Any: parameter 'k' needs a default (the schema gives k=1.0); "
        "write vmap(info, in_dims, x, k=1.0)"
    )


@pytest.mark.parametrize("first", ["self", "ctx", "cls"])
@pytest.mark.parametrize("annotated", [True, False])
def test_a_kernel_written_as_a_method_is_named_so(ns: str, first: str, annotated: bool) -> None:
    source = f"def default({first}, x: Tensor) -> Tensor:" if annotated else f"def default({first}, x):"
    keywords = "" if annotated else ", schema='(Tensor x) -> Tensor'"
    with pytest.raises(OpDefinitionError) as info:
        exec(f"class Neg(CustomOp, name='{ns}::neg'{keywords}):\n    @staticmethod\n    {source}\n        return -x\n", {"CustomOp": CustomOp, "Tensor": Tensor})  # noqa: S102
    text = str(info.value)
    assert text.startswith(f"Neg.default({first}, x"), text
    assert f"its first parameter is {first!r}, which is no argument of the op" in text
    assert f": {first}: Tensor" not in text and "annotate it" not in text  # the fix that made an extra argument
    assert (f"drop {first!r}" if annotated else "write default(x)") in text


def test_a_kernel_without_staticmethod_and_with_self_says_both(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Neg(CustomOp, name=f"{ns}::neg"):
            def default(self, x: Tensor) -> Tensor:
                return -x

    assert str(info.value).endswith("add @staticmethod above the def and drop 'self' (the op's arguments only)")


# --------------------------------------------------------------------------- 8, 9. fixes that helped


def test_training_through_a_default_without_a_formula_offers_eager_autograd(ns: str) -> None:
    class RMS(CustomOp, name=f"{ns}::rms"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    for label, fn in call_paths(RMS).items():
        line = _first_line(_error(fn(torch.ones(2, 3, requires_grad=True)).sum().backward))
        assert line.startswith(f"Trying to backward through {ns}::rms (RMS), but no autograd formula was registered: add eager_autograd = True to class RMS"), (label, line)


def test_a_mutating_op_returning_its_argument_points_at_tag_inplace(ns: str) -> None:
    class Scale_(CustomOp, name=f"{ns}::scale_", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, k: float) -> Tensor:
            return x.mul_(k)

    for label, fn in call_paths(Scale_).items():
        line = _first_line(_error(fn, torch.ones(2), 2.0))
        assert line.startswith(f"{ns}::scale_ (Scale_.default): the output of this custom operator"), label
        fix = "tags=torch.Tag.inplace" if hasattr(torch.Tag, "inplace") else "return nothing instead (-> None)"
        assert fix in line, label


# --------------------------------------------------------------------------- found against custom_op


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
        assert isinstance(_error(fn, acc, torch.ones(2)), ValueError)
        assert acc._version > 0, label


def test_a_saved_tensor_written_by_a_raising_kernel_is_not_used_silently(ns: str) -> None:
    """Autograd refuses a Tensor that changed after it was saved, as with custom_op."""
    op = _write_then_raise(ns)
    for label, fn in call_paths(op).items():
        w = torch.ones(2, requires_grad=True)
        acc = torch.ones(2)
        out = (w * acc).sum()  # saves acc for w's gradient
        _error(fn, acc, torch.ones(2))
        assert "modified by an inplace operation" in str(_error(out.backward)), label


def test_an_empty_int_list_takes_a_none_gradient(ns: str) -> None:
    class Cat(CustomOp, name=f"{ns}::cat"):
        @staticmethod
        def cpu(xs: list[Tensor], dims: list[int]) -> Tensor:
            return torch.cat(xs).sum(dims) if dims else torch.cat(xs) * 1.0

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.sizes = [len(x) for x in inputs[0]]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return list(grad.expand(sum(ctx.sizes)).split(ctx.sizes)), None

    for dims in ([0], []):
        for label, fn in call_paths(Cat).items():
            xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
            fn(xs, dims).sum().backward()
            assert [x.grad.tolist() for x in xs] == [[1.0, 1.0], [1.0, 1.0, 1.0]], (label, dims)


def test_none_is_the_gradient_of_a_whole_tensor_list(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor, ws: list[Tensor]) -> Tensor:
            return x * sum(w.sum() for w in ws) if ws else x.clone()

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.k = sum(w.sum() for w in inputs[1]) if inputs[1] else 1.0

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return grad * ctx.k, None  # no gradient for ws

    for ws in ([torch.ones(2), torch.ones(1)], []):
        for label, fn in call_paths(Scale).items():
            x = torch.ones(2, requires_grad=True)
            fn(x, ws).sum().backward()
            assert x.grad.tolist() == ([3.0, 3.0] if ws else [1.0, 1.0]), (label, len(ws))


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
                line = _first_line(_error(fn, tensor()))
            assert line.startswith(f"{ns}::input (Op.abstract): the output of this custom operator (1) must not also be an input"), (context, label, line)


def test_a_fake_kernel_with_too_few_outputs_raises_what_eager_raises(ns: str) -> None:
    op = _fake_returns_one(ns)
    eager = _error(op.record.outputs.finish, f"{ns}::one_for_two (Op.cpu)", (), {}, torch.ones(()))
    assert type(eager) is TypeError
    for context, make in _fake_contexts().items():
        mode, tensor = make()
        for label, fn in call_paths(op).items():
            with mode:
                e = _error(fn, tensor())
            assert type(e) is TypeError, (context, label)
            assert _first_line(e).startswith(f"{ns}::one_for_two (Op.abstract) returned a"), (context, label)
    torch._dynamo.reset()
    assert _first_line(_error(_compiled(op), torch.ones(3))).startswith(f"{ns}::one_for_two (Op.abstract) returned a FakeTensor")


# --------------------------------------------------------------------------- small slips


def test_parametrize_samples_suggests_what_it_takes(ns: str) -> None:
    class Inc(CustomOp, name=f"{ns}::inc"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    e = _error(opclass.testing.parametrize_samples, Inc)
    assert "samples=[...]" in str(e) and "check_op(Inc, samples=[...])" in str(e)
    assert "or pass samples=[...]" not in str(e)
    opclass.testing.check_op(Inc, [(torch.ones(2),)])  # what it suggests works


def test_native_says_when_it_reused_a_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from opclass import native
    from opclass.core import native as core_native

    library = tmp_path / "opclass_guard.so"
    library.write_bytes(b"")
    monkeypatch.setattr(core_native, "built", lambda: library)
    monkeypatch.setattr(core_native, "load", lambda mode=None: None)
    monkeypatch.setattr(core_native, "build", lambda verbose=False: library)  # nothing rebuilt
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        native.main([])
    assert out.getvalue().splitlines()[0] == f"opclass: native guard up to date (nothing to rebuild): {library}"

    def rebuild(verbose: bool = False) -> Any:
        library.write_bytes(b"new")
        import os

        os.utime(library, ns=(1, 1))
        return library

    monkeypatch.setattr(core_native, "build", rebuild)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        native.main([])
    assert out.getvalue().splitlines()[0] == f"opclass: native guard built: {library}"
