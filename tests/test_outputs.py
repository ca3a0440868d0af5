"""The output contract on both paths: shared storages and wrong output counts are errors."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from opclass import CustomOp


def test_output_sharing_an_input_storage_is_rejected(ns: str) -> None:
    class Share(CustomOp, name=f"{ns}::share"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.empty(0).set_(x.untyped_storage())  # no view, same storage

    for call in (Share, Share.op):
        with pytest.raises(RuntimeError, match=rf"{ns}::share \(Share.cpu\): the output of this custom operator"):
            call(torch.ones(2))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_wrong_number_of_outputs_is_an_error_not_a_crash(ns: str, requires_grad: bool) -> None:
    class Pair(CustomOp, name=f"{ns}::pair"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return (x * 1, x * 2, x * 3)  # torch 2.13's dispatcher would crash on this

    message = rf"{ns}::pair \(Pair.cpu\): the kernel returned 3 values, but the op's schema declares 2 outputs"
    for call in (Pair, Pair.op):
        with pytest.raises(RuntimeError, match=message):
            call(torch.ones(2, requires_grad=requires_grad))


def test_fresh_outputs_pass(ns: str) -> None:
    class Two(CustomOp, name=f"{ns}::two"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return x * 1, x * 2

    for call in (Two, Two.op):
        a, b = call(torch.ones(2))
        assert torch.equal(a, torch.ones(2)) and torch.equal(b, torch.full((2,), 2.0))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_output_without_storage_passes(ns: str, requires_grad: bool) -> None:
    # A sparse Tensor has no storage: the cheap freshness test cannot read one, and the full
    # check decides (it used to raise "Cannot access storage" under the pure-Python guard).
    class Sparse(CustomOp, name=f"{ns}::sparse"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.detach().to_sparse()

    x = torch.tensor([0.0, 2.0, 0.0], requires_grad=requires_grad)
    for call in (Sparse, Sparse.op, Sparse, Sparse.op):
        out = call(x)
        assert out.layout == torch.sparse_coo and torch.equal(out.to_dense(), x.detach())

