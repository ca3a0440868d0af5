"""Decompositions on request (``opclass.decompositions``): the table for a set of ops (a plain
torch ``default``, a separate ``reference``, the refused cases), numerics and dynamic shapes kept
by ``run_decompositions``, and an AOTInductor package of the decomposed program run in a fresh
process that imports neither opclass nor the module that defined the ops."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp

ROOT = Path(__file__).resolve().parent.parent


def _ops(ns: str) -> dict[str, Any]:
    class Gelu(CustomOp, name=f"{ns}::gelu"):
        """A plain-torch default: it is its own decomposition."""

        @staticmethod
        def default(x: Tensor, k: float = 1.0) -> Tensor:
            return torch.nn.functional.gelu(x) * k

    class NpTanh(CustomOp, name=f"{ns}::np_tanh"):
        """A NumPy kernel with a reference in torch ops."""

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.tanh(x.numpy()))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def reference(x: Tensor) -> Tensor:
            return torch.tanh(x)

    return {"gelu": Gelu, "np_tanh": NpTanh}


class _Model(torch.nn.Module):
    def __init__(self, ops: dict[str, Any]) -> None:
        super().__init__()
        self.ops = ops
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return self.ops["np_tanh"](self.ops["gelu"](self.linear(x), 0.5)) + 1


def _targets(ep: torch.export.ExportedProgram) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_the_table_names_each_op(ns: str) -> None:
    ops = _ops(ns)
    table = opclass.decompositions(*ops.values())
    assert list(table) == [ops["gelu"].op, ops["np_tanh"].op]
    assert [fn.__name__ for fn in table.values()] == ["Gelu_default", "NpTanh_reference"]
    base = torch.export.default_decompositions()
    assert opclass.decompositions(ops["gelu"], base=base) is base and ops["gelu"].op in base
    assert set(table) <= set(opclass.decompositions())  # no op classes: every live one


def test_decomposed_program_keeps_numerics_and_dynamic_shapes(ns: str) -> None:
    ops = _ops(ns)
    model = _Model(ops)
    x = torch.randn(4, 8)
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert f"{ns}.gelu.default" in _targets(ep) and f"{ns}.np_tanh.default" in _targets(ep)
    decomposed = ep.run_decompositions(opclass.decompositions(*ops.values(), base=torch.export.default_decompositions()))
    assert not any(ns in t for t in _targets(decomposed))
    assert decomposed.range_constraints  # the batch Dim survived
    for batch in (4, 7):
        x = torch.randn(batch, 8)
        torch.testing.assert_close(decomposed.module()(x), model(x))


def test_refused_with_the_reason(ns: str) -> None:
    class NpOnly(CustomOp, name=f"{ns}::np_only"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.exp(x.numpy()))

    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, v: float) -> None:
            x.fill_(v)

    with pytest.raises(ValueError) as info:
        opclass.decompositions(NpOnly)
    assert str(info.value) == (
        f"{ns}::np_only (NpOnly) has no decomposition: its kernels (NpOnly.cpu) may leave torch (NumPy, C++, Triton). "
        "Define NpOnly.reference: the same computation in torch ops"
    )
    with pytest.raises(ValueError, match=rf"^{ns}::fill \(Fill\) mutates x, and a decomposition is functional"):
        opclass.decompositions(Fill)
    with pytest.raises(TypeError, match=r"^opclass.decompositions\(\) takes live op classes, their qualified names \('ns::op'\) or their OpOverloads"):
        opclass.decompositions(torch.nn.Linear)
    with pytest.raises(TypeError, match="takes live op classes"):
        opclass.decompositions(f"{ns}::no_such_op")


def test_an_op_is_named_as_opclass_remove_takes_it_or_by_its_overload(ns: str) -> None:
    ops = _ops(ns)
    gelu = ops["gelu"]
    expected = opclass.decompositions(gelu)
    for given in (gelu.qualname, gelu.op, getattr(torch.ops, ns).gelu):
        table = opclass.decompositions(given)
        assert list(table) == list(expected) == [gelu.op], given
        assert [fn.__name__ for fn in table.values()] == ["Gelu_default"], given


def test_every_live_op_the_table_leaves_out_is_named(ns: str) -> None:
    class NpOnly(CustomOp, name=f"{ns}::np_only"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.exp(x.numpy()))

    with pytest.warns(UserWarning, match=r"opclass.decompositions\(\): \d+ op\(s\) left out of the table stay one node each") as seen:
        table = opclass.decompositions()
    assert NpOnly.op not in table
    assert f"{ns}::np_only (NpOnly) has no decomposition: its kernels (NpOnly.cpu) may leave torch" in str(seen[0].message)


def test_a_body_op_with_a_reference_is_refused_for_it_is_never_decomposed_into(ns: str) -> None:
    class Twice(CustomOp, name=f"{ns}::twice"):
        @staticmethod
        def autograd(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def reference(x: Tensor) -> Tensor:
            return x + x

    # torch runs the body at the Autograd key before it reads a table: the program gets aten.mul.
    ep = torch.export.export(_Call(Twice), (torch.ones(3),))
    assert _targets(ep.run_decompositions({})) == ["aten.mul.Tensor"]
    with pytest.raises(ValueError) as info:
        opclass.decompositions(Twice)
    assert str(info.value).startswith(
        f"{ns}::twice (Twice) runs Twice.autograd (at Autograd) before any decomposition table is read: "
        "a decomposed program holds what Twice.autograd calls, not Twice.reference. To deploy the reference, write the op as default"
    )
    with pytest.warns(UserWarning, match=rf"{ns}::twice \(Twice\) runs Twice.autograd"):
        assert Twice.op not in opclass.decompositions()

def test_a_default_that_leaves_torch_fails_when_decomposed(ns: str) -> None:
    class NpDefault(CustomOp, name=f"{ns}::np_default"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return torch.from_numpy(np.exp(x.numpy()))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    ep = torch.export.export(_Call(NpDefault), (torch.randn(3),))
    with pytest.raises(RuntimeError, match=rf"{ns}::np_default \(NpDefault.default\) cannot be traced into torch ops .*define NpDefault.reference"):
        ep.run_decompositions(opclass.decompositions(NpDefault))


def test_a_traceable_op_decomposes_and_keeps_its_behaviour(ns: str) -> None:
    """``traceable = True``: torch.compile still traces into the kernel, torch.export still keeps the
    op, and the table decomposes it like any other."""

    class Softsign(CustomOp, name=f"{ns}::softsign"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x / (1 + x.abs())

    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch._aot_autograd.utils import make_boxed_func

    graphs: list[str] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    x = torch.randn(4, 3)
    torch._dynamo.reset()
    try:
        got = torch.compile(lambda t: Softsign(t), backend=aot_autograd(fw_compiler=keep), fullgraph=True)(x)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, x / (1 + x.abs()))
    assert "aten.abs" in graphs[0] and ns not in graphs[0]  # traced into the kernel
    ep = torch.export.export(_Call(Softsign), (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert _targets(ep) == [f"{ns}.softsign.default"]
    decomposed = ep.run_decompositions(opclass.decompositions(Softsign))
    assert not any(ns in t for t in _targets(decomposed))
    y = torch.randn(6, 3)
    torch.testing.assert_close(decomposed.module()(y), Softsign(y))


def test_composite_ops_need_no_entry(ns: str) -> None:
    class Square(CustomOp, name=f"{ns}::square"):
        @staticmethod
        def composite(x: Tensor) -> Tensor:
            return x * x

    assert Square.op not in opclass.decompositions(Square)


class _Call(torch.nn.Module):
    def __init__(self, op: Any) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x)


@dataclasses.dataclass
class _Package:
    path: str
    model: _Model


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Package]:
    """An AOTInductor package of the decomposed program of ``_Model`` (batch size dynamic), built once."""
    namespace = "t_decompose_package"
    ops = _ops(namespace)
    model = _Model(ops)
    ep = torch.export.export(model, (torch.randn(5, 8),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    decomposed = ep.run_decompositions(opclass.decompositions(*ops.values(), base=torch.export.default_decompositions()))
    try:
        path = torch._inductor.aoti_compile_and_package(decomposed, package_path=str(tmp_path_factory.mktemp("aoti") / "model.pt2"))
    except Exception as e:  # noqa: BLE001 - a machine without a C++ toolchain cannot build one
        opclass.remove_namespace(namespace)
        pytest.skip(f"AOTInductor cannot build a package here: {type(e).__name__}: {str(e).splitlines()[0]}")
    yield _Package(path, model)
    opclass.remove_namespace(namespace)


@pytest.mark.slow
def test_aoti_package_runs_without_python_ops(package: _Package, tmp_path: Path) -> None:
    """The package is loaded in a fresh process that imports neither opclass nor this module, so no
    op class is defined there."""
    x = torch.randn(3, 8)  # another batch size than exported with
    expected = package.model(x)
    torch.save(x, tmp_path / "x.pt")
    code = (
        "import sys, torch\n"
        f"m = torch._inductor.aoti_load_package({package.path!r})\n"
        f"y = m(torch.load({str(tmp_path / 'x.pt')!r}))\n"
        f"torch.save(y, {str(tmp_path / 'y.pt')!r})\n"
        "print(sorted(k for k in sys.modules if k.startswith('opclass') or k.startswith('test_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), expected)


@pytest.mark.slow
def test_cpp_loader_runs_the_package(package: _Package, tmp_path: Path) -> None:
    """torch's C++ loader (``AOTIModelPackageLoader``) runs the package in a program with no Python:
    ``tests/aoti_loader.cpp``, compiled here against the installed torch's headers and libraries."""
    torch_dir = Path(torch.__file__).parent
    header = torch_dir / "include" / "torch" / "csrc" / "inductor" / "aoti_package" / "model_package_loader.h"
    compiler = shutil.which(os.environ.get("CXX", "g++"))
    if compiler is None or not header.exists():
        pytest.skip(f"no C++ compiler ({os.environ.get('CXX', 'g++')}) or no torch C++ headers ({header}) here")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    loader = tmp_path / "aoti_loader"
    build = subprocess.run(
        [compiler, "-O1", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{torch_dir / 'include'}", str(ROOT / "tests" / "aoti_loader.cpp"),
         "-o", str(loader), f"-L{torch_dir / 'lib'}", "-ltorch", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_dir / 'lib'}"],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    x = torch.randn(4, 8)
    x.numpy().tofile(tmp_path / "x.bin")
    # The package's own library needs torch's too, when the loader opens it: the library path says where.
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(torch_dir / "lib"), os.environ.get("LD_LIBRARY_PATH")])))
    command = [str(loader), package.path, str(tmp_path / "x.bin"), "4", "8", str(tmp_path / "y.bin")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    got = torch.from_numpy(np.fromfile(tmp_path / "y.bin", dtype=np.float32)).reshape(4, 8)
    torch.testing.assert_close(got, package.model(x))
