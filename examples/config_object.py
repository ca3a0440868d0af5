"""A config object as an op argument: a frozen dataclass becomes a torch opaque value type.

``cfg: QuantConfig`` is one schema argument. The kernel gets the object itself; torch.compile
treats it as a constant (same value: no recompile; another value: one recompile); torch.export
prints it into the graph.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor

import opclass


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    bits: int = 8
    scale: float = 0.1


class FakeQuant(opclass.CustomOp, name="opclass_examples::fake_quant"):
    """Round to a signed ``cfg.bits``-bit grid of step ``cfg.scale``."""

    @staticmethod
    def cpu(x: Tensor, cfg: QuantConfig) -> Tensor:
        q = 2 ** (cfg.bits - 1)
        return torch.round(x / cfg.scale).clamp(-q, q - 1) * cfg.scale

    @staticmethod
    def abstract(x: Tensor, cfg: QuantConfig) -> Tensor:
        return torch.empty_like(x)


def main() -> None:
    x = torch.linspace(-1, 1, 9)
    cfg = QuantConfig(bits=4, scale=0.25)
    y = FakeQuant(x, cfg)
    torch.testing.assert_close(y, torch.round(x / 0.25).clamp(-8, 7) * 0.25)
    # The schema names the class by its module path, e.g. "(Tensor x, __main__.QuantConfig cfg) -> Tensor".
    assert FakeQuant.schema.endswith("QuantConfig cfg) -> Tensor")

    torch.library.opcheck(FakeQuant.op, (x, cfg))

    compiles = 0

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Callable[..., Any]:
        nonlocal compiles
        compiles += 1
        return gm.forward

    f = torch.compile(lambda x, cfg: FakeQuant(x, cfg) * 2, backend=counting_backend, fullgraph=True)
    f(x, cfg)
    f(x, QuantConfig(bits=4, scale=0.25))  # equal value: the compiled graph is reused
    assert compiles == 1
    torch.testing.assert_close(f(x, QuantConfig(bits=2, scale=0.5)), FakeQuant(x, QuantConfig(2, 0.5)) * 2)
    assert compiles == 2  # another value: one recompile

    class Quantize(torch.nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return FakeQuant(x, cfg)

    ep = torch.export.export(Quantize(), (x,))
    torch.testing.assert_close(ep.module()(x), y)
    print(f"{FakeQuant.qualname}{FakeQuant.schema}: {y.tolist()}; compiles={compiles}")


if __name__ == "__main__":
    main()
