"""torch.compile and op classes: a call is one node, with no graph break and no recompile per call;
after a graph break at the op its kernels run untraced; ``torch.compile(MyOp)`` is a clear error."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import Tensor

from opclass import CustomOp


def _counting_backend() -> tuple[Callable[..., Any], list[torch.fx.GraphModule]]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend, graphs


def test_one_node_no_recompile(ns: str) -> None:
    class Axpy(CustomOp, name=f"{ns}::axpy"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
            return a * x + y

        @staticmethod
        def abstract(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
            return torch.empty_like(x)

    backend, graphs = _counting_backend()
    fn = torch.compile(lambda x, y: Axpy(x, y, a=3.0) + 1, backend=backend, fullgraph=True)
    for _ in range(3):
        x, y = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(fn(x, y), 3.0 * x + y + 1)
    assert len(graphs) == 1  # compiled once, reused for every call
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count(Axpy.op) == 1


def test_plain_eager_and_compiled_agree_with_grad(ns: str) -> None:
    class Square(CustomOp, name=f"{ns}::square"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * x

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x = torch.randn(5, requires_grad=True)
    compiled = torch.compile(lambda t: Square(t).sum(), backend="aot_eager", fullgraph=True)
    (g_compiled,) = torch.autograd.grad(compiled(x), x)
    (g_eager,) = torch.autograd.grad(Square(x).sum(), x)
    torch.testing.assert_close(g_compiled, g_eager)
    torch.testing.assert_close(g_eager, 2 * x.detach())


# --------------------------------------------------------------------------- torch.compile(MyOp)


def test_compiling_an_op_class_is_a_clear_error_and_changes_nothing(ns: str) -> None:
    class Plus(CustomOp, name=f"{ns}::plus"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    with pytest.raises(TypeError, match=r"torch.compile\(Plus\) cannot compile an op class: .* torch.compile\(lambda x: Plus\(x\)\)"):
        torch.compile(Plus, fullgraph=True)
    assert "__call__" not in vars(Plus)
    compiled = torch.compile(lambda x: Plus(x), backend="aot_eager", fullgraph=True)
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]


# --------------------------------------------------------------------------- kernels shielded from dynamo


def _nonzero(x: Tensor) -> Tensor:
    import numpy as np

    return torch.from_numpy(np.ascontiguousarray(np.stack(np.nonzero(x.numpy()), axis=1), dtype=np.int64))


def _nonzero_fake(x: Tensor) -> Tensor:
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(), x.dim(), dtype=torch.int64)


def _graph_breaks(op: Any) -> int:
    import torch._dynamo
    from torch._dynamo.utils import counters

    def f(x: Tensor) -> Tensor:
        y = x * 2
        return op(y).sum() + y.sum()  # a data-dependent output shape: a graph break at the op

    torch._dynamo.reset()
    counters.clear()
    try:
        out = torch.compile(f, backend="aot_eager")(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
        assert out.item() == f(torch.tensor([[0.0, 1.0], [2.0, 0.0]])).item()
        return sum(counters["graph_break"].values())
    finally:
        torch._dynamo.reset()


def test_kernels_run_untraced_after_a_graph_break(ns: str) -> None:
    """After the op's graph break the op runs eagerly; dynamo must not trace into its kernels
    (NumPy code: more graph breaks), on the class call or through the dispatcher, as custom_op."""

    class Nonzero(CustomOp, name=f"{ns}::nonzero"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return _nonzero(x)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return _nonzero_fake(x)

    lib = torch.library.custom_op(f"{ns}::reference_nonzero", mutates_args=())(_reference_nonzero)
    lib.register_fake(_nonzero_fake)
    try:
        expected = _graph_breaks(lib)
        assert expected == 1
        assert _graph_breaks(Nonzero) == expected
        assert _graph_breaks(Nonzero.op) == expected
    finally:
        lib._lib._destroy()


def _reference_nonzero(x: Tensor) -> Tensor:
    return _nonzero(x)
