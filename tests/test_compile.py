"""torch.compile sees an op class call as one node, with no graph break and no recompile per call."""

from __future__ import annotations

from typing import Any, Callable

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
