"""Fake kernels (``abstract``): FakeTensorMode runs them, ``get_ctx`` gives data-dependent sizes, ops
returning nothing or tagged inplace/out get a generated one, and an op without one (or with one
that reads values) gets an error naming the hook."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from opclass import CustomOp

from _errors import compiled_call, error_of, first_line
from _versions import needs_tag


# --------------------------------------------------------------------------- abstract


def test_fake_tensor_mode_uses_abstract(ns: str) -> None:
    calls: list[str] = []

    class Pad(CustomOp, name=f"{ns}::pad_one"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            calls.append("cpu")
            return torch.nn.functional.pad(x, (0, 1))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            calls.append("abstract")
            return x.new_empty(*x.shape[:-1], x.shape[-1] + 1)

    with FakeTensorMode():
        y = Pad(torch.empty(2, 3))
    assert isinstance(y, FakeTensor)
    assert y.shape == (2, 4)
    assert calls == ["abstract"]


def test_abstract_can_use_get_ctx(ns: str) -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    class Nonzero(CustomOp, name=f"{ns}::nonzero"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.nonzero(x)

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            k = torch.library.get_ctx().new_dynamic_size()
            return x.new_empty(k, x.dim(), dtype=torch.int64)

    with FakeTensorMode(shape_env=ShapeEnv()):
        y = Nonzero(torch.empty(3, 3))
    assert isinstance(y.shape[0], torch.SymInt) and y.shape[1] == 2


# --------------------------------------------------------------------------- generated fake kernels


def test_op_returning_none_gets_generated_fake(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("dst",)):
        @staticmethod
        def cpu(dst: Tensor, src: Tensor) -> None:
            dst.add_(src)

    with FakeTensorMode():
        assert AddInto(torch.empty(2), torch.empty(2)) is None

    def fn(dst: Tensor, src: Tensor) -> Tensor:
        AddInto(dst, src)
        return dst * 2

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    dst = torch.zeros(3)
    torch.testing.assert_close(compiled(dst, torch.ones(3)), torch.full((3,), 2.0))
    torch.testing.assert_close(dst, torch.ones(3))
    torch._dynamo.reset()


def test_functional_op_returning_none_works_under_compile(ns: str) -> None:
    seen: list[float] = []

    class Log(CustomOp, name=f"{ns}::log_value"):
        @staticmethod
        def cpu(x: Tensor) -> None:
            seen.append(float(x.sum()))

    torch._dynamo.reset()
    compiled = torch.compile(lambda t: (Log(t), t + 1)[1], fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert seen == [2.0]
    torch._dynamo.reset()


@pytest.mark.parametrize("tag_name", [pytest.param("inplace", marks=needs_tag("inplace")), pytest.param("out", marks=needs_tag("out"))])
def test_abstract_on_inplace_or_out_op_warns_naming_the_class(ns: str, tag_name: str) -> None:
    tag = getattr(torch.Tag, tag_name)
    with pytest.warns(UserWarning) as record:
        if tag is torch.Tag.inplace:

            class Needless(CustomOp, name=f"{ns}::needless", mutates_args=("x",), tags=tag):
                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return x.mul_(2)

                @staticmethod
                def abstract(x: Tensor) -> Tensor:
                    return x

        else:

            class Needless(CustomOp, name=f"{ns}::needless", mutates_args=("out",), tags=tag):  # type: ignore[no-redef]
                @staticmethod
                def default(x: Tensor, *, out: Tensor) -> Tensor:
                    return out.copy_(x)

                @staticmethod
                def abstract(x: Tensor, *, out: Tensor) -> Tensor:
                    return out

    messages = [str(w.message) for w in record if "unnecessary" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in record]
    assert messages[0].startswith("Needless.abstract(x: Tensor")
    assert f"an op tagged torch.Tag.{tag.name}" in messages[0] and messages[0].endswith("remove it")
    assert record[0].filename == __file__  # points at the user's def


def test_abstract_on_functional_op_does_not_warn(ns: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Fine(CustomOp, name=f"{ns}::fine"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x + 1

            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)


# --------------------------------------------------------------------------- no fake kernel, or one that reads values


def test_missing_abstract_gives_clear_error_under_fake_mode(ns: str) -> None:
    class NoFake(CustomOp, name=f"{ns}::no_fake"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    with FakeTensorMode():
        x = torch.empty(2)
        with pytest.raises(RuntimeError) as info:
            NoFake(x)
    message = str(info.value)
    assert NoFake.qualname in message
    assert "NoFake.abstract" in message
    # Eager still works.
    torch.testing.assert_close(NoFake(torch.zeros(2)), torch.ones(2))


def test_meta_tensors_without_abstract_or_default_raise(ns: str) -> None:
    class OnlyCpu(CustomOp, name=f"{ns}::only_cpu_meta"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    with pytest.raises(RuntimeError, match="no fake kernel"):
        OnlyCpu(torch.zeros(2, device="meta"))


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
    assert first_line(error_of(compiled_call(op), torch.ones(3))).startswith(expected)
    assert first_line(error_of(torch.export.export, _Call(op), (torch.ones(3),))).startswith(expected)
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

    e = error_of(torch.export.export, _Call(Head), (torch.randn(5), torch.tensor(3)))
    line = first_line(e)
    assert line.startswith(f"{ns}::head (Head.abstract): the fake kernel reads a Tensor's values"), line
    assert "torch.library.get_ctx().new_dynamic_size()" in line
    # torch.compile: its backend error comes first ("backend='aot_eager' raised:"), then this line.
    torch._dynamo.reset()
    text = str(error_of(compiled_call(Head), torch.randn(5), torch.tensor(3)))
    assert f"{ns}::head (Head.abstract): the fake kernel reads a Tensor's values" in text.splitlines()[1]
