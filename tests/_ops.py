"""Op classes that more than one test file uses, each defined in the namespace the caller gives."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from opclass import CustomOp


def numpy_doubler(ns: str) -> Any:
    """``ns::double``: its kernel doubles ``x`` through NumPy (a write no version counter sees)
    without declaring it, and returns ``x + 1``."""

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
