"""Platforms: providers that need a CUDA compute capability window or a platform within the cuda
device type (ROCm), default orders per platform that an order extends with ``...``, tested on CPU
with injected platform facts (``opclass.testing.platform``) and fake CUDA tensors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

import opclass
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths
from opclass.testing import platform

ROOT = Path(__file__).resolve().parent.parent


def cuda_tensor() -> Tensor:
    with FakeTensorMode():
        return torch.empty(4, device="cuda")


def gpu_op(ns: str) -> Any:
    class Norm(CustomOp, name=f"{ns}::norm"):
        provider_orders = {"rocm": ("aiter", "default"), "cuda": ("blackwell", "hopper_to_ampere", "default")}

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider(capability=((8, 0), (9, 0)))
        @staticmethod
        def hopper_to_ampere(x: Tensor) -> Tensor:
            return x + x

        @opclass.provider(capability=(10, 0))
        @staticmethod
        def blackwell(x: Tensor) -> Tensor:
            return x + x

        @opclass.provider("cuda", platform="rocm")
        @staticmethod
        def aiter(x: Tensor) -> Tensor:
            return x + x

    return Norm


@pytest.mark.parametrize(
    ("cuda", "capability", "chosen"),
    [("cuda", (8, 0), "hopper_to_ampere"), ("cuda", (9, 0), "hopper_to_ampere"), ("cuda", (10, 0), "blackwell"), ("cuda", (7, 5), "default"), ("rocm", (9, 4), "aiter")],
)
def test_capability_windows_and_platform_orders_choose_as_declared(ns: str, cuda: str, capability: tuple[int, int], chosen: str) -> None:
    op, x = gpu_op(ns), cuda_tensor()
    with platform(cuda, capability):
        assert opclass.which_provider(op, x) == chosen
        explained = opclass.explain_providers(op, x)
    assert f"  {chosen} ({'any device' if chosen == 'default' else 'cuda'}): runs" in explained
    # Each platform's order names its own providers only.
    assert ("hopper_to_ampere (cuda): not in the order in force" if cuda == "rocm" else "aiter (cuda): not in the order in force") in explained
    if chosen == "default":
        assert "hopper_to_ampere (cuda): needs compute capability 8.0 to 9.0, this device has 7.5" in explained
        assert "blackwell (cuda): needs compute capability 10.0 or higher, this device has 7.5" in explained


def test_providers_of_lists_platforms_and_capabilities(ns: str) -> None:
    listed = {p.name: (p.devices, p.platform, p.capability) for p in opclass.providers_of(gpu_op(ns))}
    assert listed["aiter"] == (("cuda",), "rocm", None)
    assert listed["hopper_to_ampere"] == (("cuda",), None, ((8, 0), (9, 0)))
    assert listed["blackwell"] == (("cuda",), None, ((10, 0), None))
    assert listed["default"] == (None, None, None)


def test_a_provider_for_another_platform_says_so(ns: str) -> None:
    op, x = gpu_op(ns), cuda_tensor()
    with platform("cuda", (9, 0)), opclass.use_providers({op: ["aiter", "default"]}):
        assert opclass.which_provider(op, x) == "default"
        assert "aiter (cuda): needs rocm, this is cuda" in opclass.explain_providers(op, x)


def test_no_cuda_device_means_no_capability(ns: str) -> None:
    op, x = gpu_op(ns), cuda_tensor()
    with platform("cuda", None):
        assert opclass.which_provider(op, x) == "default"
        assert "this device has none (no CUDA device)" in opclass.explain_providers(op, x)


def test_the_facts_come_back_after_the_block(ns: str) -> None:
    op, x = gpu_op(ns), cuda_tensor()
    with platform("rocm", (9, 4)):
        assert opclass.which_provider(op, x) == "aiter"
    with platform("cuda", (10, 0)):
        assert opclass.which_provider(op, x) == "blackwell"
    if not torch.cuda.is_available():  # this machine's facts again: no CUDA device
        assert opclass.which_provider(op, x) == "default"


def cpu_op(ns: str) -> Any:
    class Shift(CustomOp, name=f"{ns}::shift"):
        provider_orders = {"cpu": ("two", "default")}

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.clone()

        @opclass.provider("cpu")
        @staticmethod
        def one(x: Tensor) -> Tensor:
            return x + 1

        @opclass.provider("cpu")
        @staticmethod
        def two(x: Tensor) -> Tensor:
            return x + 2

    return Shift


def ran(op: Any, x: Tensor) -> set[float]:
    return {float((fn(x) - x)[0]) for fn in call_paths(op).values()}


def test_a_platform_order_is_the_default_an_order_extends_with_ellipsis(ns: str) -> None:
    op, x = cpu_op(ns), torch.zeros(2)
    assert ran(op, x) == {2.0}  # the cpu order, on every route
    assert opclass.which_provider(op, x) == "two"
    assert opclass.provider_order(op, "cpu") == ("two", "default")
    opclass.set_provider_order(op, ["one", ...])  # one, then the cpu order: two, default
    try:
        assert ran(op, x) == {1.0}
        assert opclass.provider_order(op, "cpu") == ("one", "two", "default")
        assert opclass.provider_order(op) == ("one", "two", "default")  # ...: the declaration's rest
        with opclass.use_providers({op: ["default", "..."]}):
            assert ran(op, x) == {0.0}
            assert [e.split(":")[0].strip() for e in opclass.explain_providers(op, x).splitlines()[1:3]] == ["default (any device)", "two (cpu)"]
    finally:
        opclass.set_provider_order(op, None)
    with opclass.use_providers({op: ["one"]}):  # an order without ... restricts, as before
        assert ran(op, x) == {1.0}


def test_a_deployment_gives_an_order_per_platform(tmp_path: Path) -> None:
    script = tmp_path / "platform_env.py"
    script.write_text(
        "import torch, opclass\nfrom torch import Tensor\n"
        "class Op(opclass.CustomOp, name='t_penv::op'):\n"
        "    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x.clone()\n"
        "    @opclass.provider('cpu')\n    @staticmethod\n    def one(x: Tensor) -> Tensor:\n        return x + 1\n"
        "    @opclass.provider('cpu')\n    @staticmethod\n    def two(x: Tensor) -> Tensor:\n        return x + 2\n"
        "print(float(Op(torch.zeros(1))[0]), float(Op.op(torch.zeros(1))[0]))\n"
    )

    def run(value: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPCLASS_PROVIDERS": value}
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
        return (done.stdout + done.stderr).strip().splitlines()[-1]

    assert run("t_penv::op@cpu=two,...") == "2.0 2.0"
    assert run("t_penv::op@rocm=default;t_penv::op=two") == "2.0 2.0"  # the rocm order is not this platform's
    assert run("t_penv::op=default,...") == "0.0 0.0"
    assert "'rcom' in t_penv::op@rcom is no platform; the platforms are cpu, cuda" in run("t_penv::op@rcom=two")


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("opclass.provider('cuda', platform='rcom')", "provider 'bad': platform='rcom' with device cuda names no platform it runs on"),
        ("opclass.provider('cpu', platform='rocm')", "provider 'bad': platform='rocm' with device cpu names no platform it runs on"),
        ("opclass.provider(capability=(8,))", "provider 'bad': capability=(8,) is no window of CUDA compute capabilities"),
        ("opclass.provider('cpu', capability=(8, 0))", "provider 'bad': capability=((8, 0), None) is no window of CUDA compute capabilities on the cuda device type"),
    ],
)
def test_a_platform_mistake_is_refused_at_class_creation(ns: str, declaration: str, message: str) -> None:
    with pytest.raises(OpDefinitionError, match=re.escape(message)):

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x.clone()

            bad = eval(declaration)(staticmethod(lambda x: x + 1))


@pytest.mark.parametrize(
    ("orders", "message"),
    [
        ({"rcom": ("fast",)}, "'rcom' is no platform \\(those are cpu, cuda, .*did you mean 'rocm'"),
        ({"cpu": ("fats", "default")}, "the order for cpu names 'fats', which is no provider of the op \\(it has fast, default\\).*did you mean 'fast'"),
        ({"cpu": "fast"}, "the order for cpu must be a list of provider names"),
        ({"cpu": ("fast", "fast")}, "the order for cpu names 'fast' twice"),
    ],
)
def test_a_provider_orders_mistake_is_refused_at_class_creation(ns: str, orders: Any, message: str) -> None:
    with pytest.raises(OpDefinitionError, match=message):

        class Bad(CustomOp, name=f"{ns}::bad"):
            provider_orders = orders

            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x.clone()

            fast = opclass.provider("cpu")(staticmethod(lambda x: x + 1))
