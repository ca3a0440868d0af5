"""Eager-autograd ops: ``eager_autograd = True`` differentiates through the kernel.

Eager training differentiates the kernel's own torch ops (no backward written). Under a
TorchDispatchMode (torch.compile, torch.export, FakeTensor, any user mode) the op is one opaque
node; with grad, its backward is the opaque ``<name>_eager_backward`` op, which recomputes the
kernel under autograd. Gradients agree everywhere with the same computation written inline.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import opclass
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths
from opclass.testing import check_op


def reference(x: Tensor, limit: float) -> Tensor:
    if x.abs().max() > 100:
        x = x.clamp(-100, 100)
    return limit * torch.tanh(x / limit)


def make_clip(ns: str, calls: list[str] | None = None) -> Any:
    class SoftClip(CustomOp, name=f"{ns}::soft_clip"):
        eager_autograd = True

        @staticmethod
        def default(x: Tensor, limit: float = 2.0) -> Tensor:
            if calls is not None:
                calls.append("default")
            return reference(x, limit)  # data-dependent Python: fine, the op stays opaque

        @staticmethod
        def abstract(x: Tensor, limit: float = 2.0) -> Tensor:
            return torch.empty_like(x)

    return SoftClip


def make_multi(ns: str) -> Any:
    """Two outputs, a Tensor-list input, an optional Tensor and a keyword-only Tensor."""

    class Mix(CustomOp, name=f"{ns}::mix"):
        eager_autograd = True

        @staticmethod
        def cpu(x: Tensor, ws: list[Tensor], b: Tensor | None, *, scale: Tensor) -> tuple[Tensor, Tensor]:
            acc = sum((w * x for w in ws), torch.zeros_like(x))
            if b is not None:
                acc = acc + b
            return acc * scale, (x * scale).exp()

        @staticmethod
        def abstract(x: Tensor, ws: list[Tensor], b: Tensor | None, *, scale: Tensor) -> tuple[Tensor, Tensor]:
            return torch.empty_like(x), torch.empty_like(x)

    return Mix


def leaves(*shapes: tuple[int, ...], seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]


def grads_of(fn: Any, inputs: list[Tensor]) -> list[Tensor | None]:
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    sum(o.sin().sum() for o in outs).backward()
    return [t.grad for t in inputs]


class OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("big", [False, True], ids=["small", "big"])
@pytest.mark.parametrize("call", ["class", "op"])
def test_eager_grads_differentiate_the_kernel(ns: str, call: str, big: bool) -> None:
    op = make_clip(ns)
    fn = op if call == "class" else op.op
    (x,) = leaves((6,))
    if big:
        x = (x.detach() * 300).requires_grad_()
    out = fn(x, 1.5)
    # The kernel's own ops are on the graph: no Function, no backward of ours.
    assert type(out.grad_fn).__name__ == "MulBackward0"
    torch.testing.assert_close(grads_of(lambda t: fn(t, 1.5), [x]), grads_of(lambda t: reference(t, 1.5), [x]))
    assert torch.autograd.gradcheck(lambda t: fn(t, 1.5), (x,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda t: fn(t, 1.5), (x,))


def test_no_grad_runs_the_kernel_once_without_graph(ns: str) -> None:
    calls: list[str] = []
    op = make_clip(ns, calls)
    x = torch.randn(4)
    for fn in (op, op.op):
        assert fn(x).grad_fn is None
        with torch.no_grad():
            assert fn(x.requires_grad_()).grad_fn is None
        x = x.detach()
        with torch.inference_mode():
            torch.testing.assert_close(fn(torch.ones(3)), reference(torch.ones(3), 2.0))
    assert calls == ["default"] * 6


def test_forward_ad_tangents(ns: str) -> None:
    op = make_clip(ns)
    x, t = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    expected = torch.func.jvp(lambda v: reference(v, 2.0), (x,), (t,))[1]
    for fn in (op, op.op):
        with fwAD.dual_level():
            out = fn(fwAD.make_dual(x, t))
            torch.testing.assert_close(fwAD.unpack_dual(out).tangent, expected)


def test_under_a_dispatch_mode_the_op_and_its_backward_stay_opaque(ns: str) -> None:
    """Under any TorchDispatchMode (here a logging one) grad goes through the backward op."""
    op = make_clip(ns)
    (x,) = leaves((6,))
    with OpLog() as log:
        out = op(x, 1.5)
        (g,) = torch.autograd.grad(out.sin().sum(), x)
    assert f"{ns}.soft_clip.default" in log.ops and f"{ns}.soft_clip_eager_backward.default" in log.ops
    assert not any("tanh" in o for o in log.ops)  # the recompute runs inside the backward op
    torch.testing.assert_close(g, grads_of(lambda t: reference(t, 1.5), [x])[0])


@pytest.mark.parametrize("mode", ["direct", "opaque"])
def test_multi_output_lists_optional_keyword_only(ns: str, mode: str) -> None:
    op = make_multi(ns)
    x, w0, w1, b, scale = leaves((3,), (3,), (3,), (3,), (3,), seed=1)
    b = b.detach()  # an input that needs no grad

    def ours(x: Tensor, w0: Tensor, w1: Tensor, scale: Tensor) -> Any:
        if mode == "opaque":
            with OpLog():
                return op(x, [w0, w1], b, scale=scale)
        return op(x, [w0, w1], b, scale=scale)

    def ref(x: Tensor, w0: Tensor, w1: Tensor, scale: Tensor) -> Any:
        return ((w0 * x + w1 * x + b) * scale, (x * scale).exp())

    ins = [x, w0, w1, scale]
    got, want = grads_of(ours, ins), grads_of(ref, ins)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)

    # One output unused: its gradient is zero, the others still flow.
    out0, _ = ours(*ins)
    (gx,) = torch.autograd.grad(out0.sum(), x)
    torch.testing.assert_close(gx, (w0 + w1) * scale)


def test_opcheck_gradcheck_and_fast_path_via_testing_helper(ns: str) -> None:
    op = make_clip(ns)
    check_op(op, [(torch.randn(5, dtype=torch.float64, requires_grad=True), 3.0), (torch.randn(2, 3, dtype=torch.float64),)])
    mix = make_multi(ns)
    x, w, s = leaves((3,), (3,), (3,))
    check_op(mix, [opclass.testing.Sample((x, [w, w.detach()], None), {"scale": s})])


def test_compile_with_grad_keeps_forward_and_backward_opaque(ns: str) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._functorch.aot_autograd import aot_function
    from functorch.compile import make_boxed_func

    op = make_clip(ns)
    backend = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda t: op(t, 1.5).sin(), backend=backend, fullgraph=True)
    for scale in (1.0, 300.0):  # both sides of the kernel's data-dependent branch
        (x,) = leaves((6,))
        x = (x.detach() * scale).requires_grad_()
        (g,) = torch.autograd.grad(compiled(x).sum(), x)
        torch.testing.assert_close(g, grads_of(lambda t: reference(t, 1.5), [x])[0])
    assert backend.frame_count == 1
    assert [str(n.target) for n in backend.graphs[0].graph.nodes if n.op == "call_function"][0] == f"{ns}.soft_clip.default"

    graphs: list[list[str]] = []

    def keep(gm: torch.fx.GraphModule, _: Any) -> Any:
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return make_boxed_func(gm.forward)

    (x,) = leaves((6,))
    aot_function(lambda t: op.op(t, 1.5), fw_compiler=keep, bw_compiler=keep)(x).sum().backward()
    forward, backward = graphs
    assert forward == [f"{ns}.soft_clip.default"]
    assert f"{ns}.soft_clip_eager_backward.default" in backward and not any("tanh" in n for n in backward)


@pytest.mark.slow
def test_compile_inference_and_inductor(ns: str) -> None:
    op = make_clip(ns)
    x = torch.randn(8) * 200
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(lambda t: op(t) * 2, fullgraph=True)(x), reference(x, 2.0) * 2)
    (xg,) = leaves((8,))
    compiled = torch.compile(lambda t: op(t).sum(), fullgraph=True)  # inductor, with grad
    (g,) = torch.autograd.grad(compiled(xg), xg)
    torch.testing.assert_close(g, torch.autograd.grad(reference(xg, 2.0).sum(), xg)[0])


@pytest.mark.parametrize("requires_grad", [False, True])
def test_export_sees_one_op(ns: str, requires_grad: bool) -> None:
    op = make_clip(ns)

    class M(torch.nn.Module):
        def forward(self, t: Tensor) -> Tensor:
            return op(t, 1.5) + 1

    x = torch.randn(4, requires_grad=requires_grad)
    ep = torch.export.export(M(), (x,))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(f"{ns}.soft_clip.default") == 1 and not any("tanh" in t for t in targets)
    torch.testing.assert_close(ep.module()(x.detach()), reference(x.detach(), 1.5) + 1)


def test_torch_func_transforms(ns: str) -> None:
    op = make_clip(ns)
    x = torch.randn(5, dtype=torch.float64)
    ref_grad = torch.func.grad(lambda t: reference(t, 2.0).sum())(x)
    torch.testing.assert_close(torch.func.grad(lambda t: op(t).sum())(x), ref_grad)
    torch.testing.assert_close(torch.func.jacrev(op)(x), torch.func.jacrev(lambda t: reference(t, 2.0))(x))
    torch.testing.assert_close(torch.func.jacfwd(op)(x), torch.func.jacfwd(lambda t: reference(t, 2.0))(x))
    batch = torch.randn(3, 5) * torch.tensor([[1.0], [300.0], [1.0]])  # per-sample branches differ
    torch.testing.assert_close(torch.vmap(op)(batch), torch.stack([reference(b, 2.0) for b in batch]))
    # vmap over grad runs the kernel batched (the grad level sees it): it must be vmap-friendly.
    with pytest.raises(RuntimeError, match="data-dependent control flow"):
        torch.vmap(torch.func.grad(lambda t: op(t).sum()))(x.view(5, 1))

    class Tanh2(CustomOp, name=f"{ns}::tanh2"):
        eager_autograd = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 2 * torch.tanh(x)

    torch.testing.assert_close(torch.vmap(torch.func.grad(lambda t: Tanh2(t).sum()))(x.view(5, 1)), (2 / x.cosh() ** 2).view(5, 1))


def test_kernel_that_is_not_differentiable_runs_as_plain_torch_and_check_op_catches_it(ns: str) -> None:
    """Its output needs no grad, as the same function's without opclass (gradients that should
    flow are lost, as there): check_op's gradcheck names the op."""

    def np_sin(x: Tensor) -> Tensor:
        return torch.from_numpy(np.sin(x.detach().numpy()))

    class NumpySin(CustomOp, name=f"{ns}::np_sin"):
        eager_autograd = True
        cpu = staticmethod(np_sin)

    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    for fn in (np_sin, *call_paths(NumpySin).values()):
        assert not fn(x).requires_grad
        torch.testing.assert_close(fn(x.detach()), x.detach().sin())
    with pytest.raises(AssertionError, match=rf"{ns}::np_sin, sample 0: gradcheck failed"):
        check_op(NumpySin, [(x,)])


def test_outputs_may_not_alias_inputs(ns: str) -> None:
    class View(CustomOp, name=f"{ns}::view"):
        eager_autograd = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.view(-1)

    for t in (torch.randn(2, 2), torch.randn(2, 2, requires_grad=True)):
        with pytest.raises(RuntimeError, match="may not alias any inputs"):
            View(t)


def test_removal_takes_the_backward_op_along(ns: str) -> None:
    op = make_clip(ns)
    assert hasattr(getattr(torch.ops, ns), "soft_clip_eager_backward")
    opclass.remove(op)
    assert not hasattr(getattr(torch.ops, ns), "soft_clip_eager_backward")
    op = make_clip(ns)  # the name is free again
    (x,) = leaves((3,))
    op(x).sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("eager_autograd = 1", "must be True or False, got 1"),
        (
            "eager_autograd = True\n"
            "    @staticmethod\n    def setup_context(ctx, inputs, output): pass\n"
            "    @staticmethod\n    def backward(ctx, g): return g",
            "also defines setup_context, backward",
        ),
    ],
)
def test_definition_errors(ns: str, body: str, problem: str) -> None:
    source = (
        f"class Bad(CustomOp, name='{ns}::bad'):\n    {body}\n"
        "    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x.sin()\n"
    )
    with pytest.raises(OpDefinitionError, match=problem):
        exec(source, {"CustomOp": CustomOp, "Tensor": Tensor})


def test_definition_errors_need_a_functional_tensor_op(ns: str) -> None:
    with pytest.raises(OpDefinitionError, match="is for functional ops, and this op mutates x"):

        class AddOne(CustomOp, name=f"{ns}::add_one", mutates_args=("x",)):
            eager_autograd = True

            @staticmethod
            def default(x: Tensor) -> None:
                x.add_(1)

    with pytest.raises(OpDefinitionError, match=r"needs an op that returns Tensors, and this one returns \(Tensor, int\)"):

        class WithCount(CustomOp, name=f"{ns}::with_count"):
            eager_autograd = True

            @staticmethod
            def default(x: Tensor) -> tuple[Tensor, int]:
                return x.sin(), 1


def test_eager_autograd_false_is_a_plain_op(ns: str) -> None:
    class Plain(CustomOp, name=f"{ns}::plain"):
        eager_autograd = False

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.sin()

    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        Plain(torch.randn(2, requires_grad=True)).sum().backward()


def make_square(ns: str) -> Any:
    """Two providers with different gradients at 1: ``square`` (2) runs unless a block picks ``quad`` (4)."""

    class Square(CustomOp, name=f"{ns}::square"):
        eager_autograd = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * x

        @opclass.provider("cpu")
        @staticmethod
        def square(x: Tensor) -> Tensor:
            return x * x

        @opclass.provider("cpu")
        @staticmethod
        def quad(x: Tensor) -> Tensor:
            return 2 * x * x

    return Square


@pytest.mark.parametrize("how", ["eager", "mode", "compiled"])
def test_backward_differentiates_the_provider_the_forward_ran(ns: str, how: str) -> None:
    op = make_square(ns)
    for label, fn in call_paths(op).items():
        run = torch.compile(lambda t, fn=fn: fn(t), backend="aot_eager") if how == "compiled" else fn
        for forward, backward, value, grad in ((["quad"], None, 2.0, 4.0), (None, ["quad"], 1.0, 2.0), (None, None, 1.0, 2.0)):
            x = torch.ones(3, requires_grad=True)
            with opclass.use_providers({op: forward} if forward else {}), OpLog() if how == "mode" else contextlib.nullcontext():
                y = run(x)
            with opclass.use_providers({op: backward} if backward else {}), OpLog() if how == "mode" else contextlib.nullcontext():
                y.sum().backward()
            assert (y.detach().tolist(), x.grad.tolist()) == ([value] * 3, [grad] * 3), (label, forward, backward)


def _zeros(x: Tensor, y: Tensor) -> Tensor:
    return x.new_zeros(x.shape)


def _uses_x(x: Tensor, y: Tensor) -> Tensor:
    return x * 2


@pytest.mark.parametrize("body", [_zeros, _uses_x])
def test_a_kernel_that_ignores_an_input_gets_no_gradient_for_it_as_plain_torch(ns: str, body: Any) -> None:
    """Eager, as plain torch: an output that needs no grad, ``.grad`` None for an input the kernel
    ignores. Wherever the op is opaque (compiled, any mode) its output needs grad and an ignored
    input's gradient is zeros: the graph's outputs are fixed when it is traced, which never looks
    inside the kernel (docs/guide/autograd.md)."""

    class Op(CustomOp, name=f"{ns}::op"):
        eager_autograd = True
        default = staticmethod(body)

    def under_a_mode(x: Tensor, y: Tensor) -> Tensor:
        with OpLog():
            return Op(x, y)

    compiled = torch.compile(lambda x, y: Op(x, y), backend="aot_eager")
    for label, fn in {"plain": body, **call_paths(Op), "compiled": compiled, "mode": under_a_mode}.items():
        opaque = label in ("compiled", "mode")
        x, y = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
        assert fn(x.detach(), y).requires_grad is opaque, label  # only the ignored input needs grad
        (fn(x, y).sum() + x.sum()).backward()
        assert x.grad.tolist() == [3.0 if body is _uses_x else 1.0] * 2, label
        assert (y.grad.tolist() if opaque else y.grad) == ([0.0] * 2 if opaque else None), label
