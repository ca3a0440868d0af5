"""``default`` doubles as the fake kernel of an op without ``abstract``: FakeTensor, meta Tensors,
torch.compile, torch.export and opcheck run it on fake tensors; a kernel that cannot run there gets
the clear "define abstract" error; ``abstract``, when defined, wins."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from opclass import CustomOp

from _versions import needs_plain_opaque_values


@dataclasses.dataclass(frozen=True)
class Affine:
    scale: float = 2.0
    shift: float = 1.0


def _scaled(ns: str, seen: list[type]) -> Any:
    class Scaled(CustomOp, name=f"{ns}::scaled"):
        @staticmethod
        def default(x: Tensor, f: float) -> Tensor:
            seen.append(type(x))
            return (x * f).sum(-1)

    return Scaled


def test_fake_tensor_mode_runs_default(ns: str) -> None:
    seen: list[type] = []
    Scaled = _scaled(ns, seen)
    with FakeTensorMode():
        out = Scaled(torch.empty(4, 3), 2.0)
    assert isinstance(out, FakeTensor) and out.shape == (4,)
    assert seen == [FakeTensor]


def test_opcheck_compile_and_export(ns: str) -> None:
    Scaled = _scaled(ns, [])
    x = torch.randn(4, 3)
    torch.library.opcheck(Scaled.op, (x, 3.0))
    compiled = torch.compile(lambda t: Scaled(t, 3.0) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), (x * 3.0).sum(-1) + 1)

    class Model(torch.nn.Module):
        def forward(self, t: Tensor) -> Tensor:
            return Scaled(t, 3.0)

    exported = torch.export.export(Model(), (x,))
    assert any(n.target is Scaled.op for n in exported.graph.nodes)
    torch.testing.assert_close(exported.module()(x), (x * 3.0).sum(-1))


@needs_plain_opaque_values
def test_config_object_argument(ns: str) -> None:
    class Apply(CustomOp, name=f"{ns}::apply"):
        @staticmethod
        def default(x: Tensor, cfg: Affine) -> Tensor:
            return x * cfg.scale + cfg.shift

    cfg = Affine(scale=3.0)
    with FakeTensorMode():
        assert Apply(torch.empty(2, 5), cfg).shape == (2, 5)
    x = torch.randn(5)
    torch.library.opcheck(Apply.op, (x, cfg))
    compiled = torch.compile(lambda t: Apply(t, cfg), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), x * 3.0 + 1.0)


def test_abstract_wins(ns: str) -> None:
    calls: list[str] = []

    class Both(CustomOp, name=f"{ns}::both"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append("default")
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            calls.append("abstract")
            return torch.empty_like(x)

    with FakeTensorMode():
        Both(torch.empty(2))
    assert calls == ["abstract"]


def test_device_kernel_with_default_fake(ns: str) -> None:
    """``cpu`` serves CPU calls; ``default`` is still the one that runs on fake tensors."""
    calls: list[str] = []

    class Split(CustomOp, name=f"{ns}::split"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            calls.append("cpu")
            return x + 1

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append("default")
            return x + 1

    Split(torch.zeros(2))
    with FakeTensorMode():
        Split(torch.empty(2))
    assert calls == ["cpu", "default"]


def test_numpy_default_gets_the_define_abstract_error(ns: str) -> None:
    class NpSin(CustomOp, name=f"{ns}::np_sin"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return torch.from_numpy(np.sin(x.numpy()))

    assert torch.equal(NpSin(torch.zeros(2)), torch.zeros(2))
    expected = (
        f"{ns}::np_sin has no fake kernel, which torch.compile, torch.export and FakeTensor need: define NpSin.abstract "
        "(same arguments; build outputs with torch.empty_like etc.). NpSin.default cannot run on fake tensors: "
        "RuntimeError: .numpy() is not supported for tensor subclasses."
    )
    with FakeTensorMode(), pytest.raises(RuntimeError) as e:
        NpSin(torch.empty(2))
    assert str(e.value) == expected
    compiled = torch.compile(lambda t: NpSin(t), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=f"define NpSin.abstract"):
        compiled(torch.zeros(2))


def test_data_dependent_default_gets_the_define_abstract_error(ns: str) -> None:
    class Positive(CustomOp, name=f"{ns}::positive"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x[x > 0]

    with FakeTensorMode(), pytest.raises(RuntimeError, match=r"define Positive.abstract .*DynamicOutputShapeException"):
        Positive(torch.empty(3))


def test_default_own_error_is_unchanged(ns: str) -> None:
    """An error that is not about fake tensors is the kernel's, as in eager mode."""

    class Checked(CustomOp, name=f"{ns}::checked"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            if x.dim() != 2:
                raise ValueError(f"expected a matrix, got {x.dim()} dimensions")
            return x.t().contiguous()

    with pytest.raises(ValueError, match="expected a matrix, got 1 dimensions"):
        Checked(torch.zeros(3))
    with FakeTensorMode(), pytest.raises(ValueError, match="expected a matrix, got 1 dimensions"):
        Checked(torch.empty(3))


def test_check_op_runs_the_fake_tests_on_default(ns: str) -> None:
    from opclass.testing import check_op

    Scaled = _scaled(ns, [])
    check_op(Scaled, [(torch.randn(2, 3), 2.0)])

    class NpCos(CustomOp, name=f"{ns}::np_cos"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return torch.from_numpy(np.cos(x.numpy()))

    with pytest.raises(AssertionError, match=r"opcheck failed: .*define NpCos\.abstract"):
        check_op(NpCos, [(torch.randn(3),)])


# --------------------------------------------------------------------------- meta Tensors


def test_meta_tensors_use_abstract_not_default(ns: str) -> None:
    """``default`` is CompositeExplicitAutograd, but ``abstract`` also serves the Meta key, and wins."""
    calls: list[tuple[str, str]] = []

    class Both(CustomOp, name=f"{ns}::both_meta"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(("default", x.device.type))
            return x + 1

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            calls.append(("cpu", x.device.type))
            return x + 2

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            calls.append(("abstract", x.device.type))
            return torch.empty_like(x)

    y = Both(torch.zeros(2, device="meta"))
    assert y.is_meta and y.shape == (2,)
    assert calls == [("abstract", "meta")]


def test_meta_tensors_without_abstract_run_default(ns: str) -> None:
    """Like a ``CompositeExplicitAutograd`` kernel of ``Library.impl``: ``default`` alone serves
    meta tensors (it is the fake kernel too)."""
    calls: list[str] = []

    class OnlyDefault(CustomOp, name=f"{ns}::only_default_meta"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append(x.device.type)
            return x + 1

    y = OnlyDefault(torch.zeros(2, device="meta"))
    assert y.is_meta and y.shape == (2,)
    assert calls == ["meta"]
