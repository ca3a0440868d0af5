"""An eager-autograd op: training differentiates through the kernel, compiled graphs see one op.

``eager_autograd = True`` on an op whose kernel is made of differentiable torch ops: eager
autograd records the kernel's own ops (no ``backward`` to write), while torch.compile and
torch.export keep the op as one opaque node, for inference and for training. With grad, the
compiled backward calls a second opaque op, ``soft_clip_eager_backward``, which re-runs the
kernel under autograd. The kernel's data-dependent ``if`` never meets a tracer.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

import opclass


class SoftClip(opclass.CustomOp, name="opclass_examples::soft_clip"):
    """Smoothly squash ``x`` into ``(-limit, limit)``; outliers are clamped first."""

    eager_autograd = True

    @staticmethod
    def default(x: Tensor, limit: float = 3.0) -> Tensor:
        if x.abs().max() > 1e4:  # data-dependent Python: a tracer could not follow this
            x = x.clamp(-1e4, 1e4)
        return limit * torch.tanh(x / limit)

    @staticmethod
    def abstract(x: Tensor, limit: float = 3.0) -> Tensor:
        return torch.empty_like(x)


def main() -> None:
    x = torch.linspace(-6, 6, 7, dtype=torch.float64, requires_grad=True)

    # Eager training: autograd records the kernel's tanh and mul.
    y = SoftClip(x)
    print("eager grad_fn:", type(y.grad_fn).__name__)
    (grad,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(grad, 1 - torch.tanh(x.detach() / 3) ** 2)
    assert torch.autograd.gradcheck(SoftClip, (x,), check_forward_ad=True)
    torch.library.opcheck(SoftClip.op, (x, 2.0))

    # torch.compile with grad: one node in the graph, the backward is the recompute op.
    graphs: list[list[str]] = []

    def record_graph(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Callable[..., Any]:
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    compiled = torch.compile(lambda t: SoftClip(t).sum(), backend=record_graph, fullgraph=True)
    (compiled_grad,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close(compiled_grad, grad)
    print("compiled graph:", graphs[0])
    assert graphs[0][0] == "opclass_examples.soft_clip.default"

    # torch.export for inference: the op is one node.
    class Model(torch.nn.Module):
        def forward(self, t: Tensor) -> Tensor:
            return SoftClip(t) * 2

    ep = torch.export.export(Model(), (x.detach(),))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    print("exported graph:", targets)
    assert targets.count("opclass_examples.soft_clip.default") == 1


if __name__ == "__main__":
    main()
