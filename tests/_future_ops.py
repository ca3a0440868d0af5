"""Ops defined in a module with ``from __future__ import annotations`` (used by test_schema.py).

Every annotation below is a string at runtime; opclass has to evaluate it to derive the schema.
The classes are built inside a function so each test can give its own namespace.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from opclass import CustomOp


def define_future_ops(ns: str) -> dict[str, type[CustomOp]]:
    """Define the string-annotated ops in namespace ``ns``; returns them by short name."""

    class FutureScale(CustomOp, name=f"{ns}::future_scale"):
        @staticmethod
        def cpu(
            x: Tensor,
            bias: Optional[Tensor],
            shape: Sequence[int],
            dtype: torch.dtype = torch.float64,
            *,
            alpha: float = 2.0,
            other: Tensor | None = None,
        ) -> Tensor:
            out = (x * alpha).reshape(shape).to(dtype)
            if bias is not None:
                out = out + bias.reshape(shape)
            if other is not None:
                out = out + other.reshape(shape)
            return out

        @staticmethod
        def abstract(
            x: Tensor,
            bias: Optional[Tensor],
            shape: Sequence[int],
            dtype: torch.dtype = torch.float64,
            *,
            alpha: float = 2.0,
            other: Tensor | None = None,
        ) -> Tensor:
            return x.new_empty(list(shape), dtype=dtype)

    class FutureSplit(CustomOp, name=f"{ns}::future_split"):
        @staticmethod
        def default(x: Tensor, n: int) -> tuple[Tensor, list[Tensor], int]:
            return x + n, [x * i for i in range(n)], x.numel()

    return {"scale": FutureScale, "split": FutureSplit}
