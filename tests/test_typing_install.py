"""Typing out of the box: opclass installed the README's way, checked with no set-up of its own.

The README installs with ``pip install -e ".[test]"``. A user's mypy config then has only
``plugins = opclass.mypy`` (strict too), and pyright has no config at all: both must find
opclass, type op calls precisely and flag each wrong call naming the argument. The check runs in
the environment running the tests when it has this checkout installed (CI runs the tests in the
README's venv); elsewhere (e.g. a worktree on ``PYTHONPATH``) it skips and says why.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # mypy and pyright, in subprocesses

ROOT = Path(__file__).resolve().parent.parent

LIBRARY = '''\
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from opclass import CustomOp


class BiasGelu(CustomOp, name="install_lib::bias_gelu"):
    @staticmethod
    def cpu(x: Tensor, bias: Tensor, *, approximate: bool = False) -> Tensor:
        return torch.nn.functional.gelu(x + bias, approximate="tanh" if approximate else "none")

    @staticmethod
    def cuda(x: Tensor, bias: Tensor, *, approximate: bool = False) -> Tensor:
        return torch.nn.functional.gelu(x + bias, approximate="tanh" if approximate else "none")


class MinMax(CustomOp, name="install_lib::min_max"):
    @staticmethod
    def default(xs: list[Tensor], scale: Optional[float] = None) -> tuple[Tensor, Tensor]:
        x = torch.stack(xs)
        return x.min(), x.max()


class Scaling(CustomOp, namespace="install_lib"):
    """Abstract: the shared autograd formula; each variant brings its kernel and signature."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.k = inputs[1] if len(inputs) > 1 else 2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        return (grad * ctx.k,)


class Double(Scaling):
    @staticmethod
    def default(x: Tensor) -> Tensor:
        return 2 * x


class ScaleBy(Scaling):
    @staticmethod
    def default(x: Tensor, k: int) -> Tensor:
        return k * x


class DoubleOnCpu(Double):
    """A variant that keeps its base op's signature."""

    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        return x + x
'''

# (call, revealed type under mypy, under pyright)
REVEALS = [
    ("BiasGelu(x, x)", "torch._tensor.Tensor", "Tensor"),
    ("BiasGelu(x, bias=x, approximate=True)", "torch._tensor.Tensor", "Tensor"),
    ("MinMax([x, x])", "tuple[torch._tensor.Tensor, torch._tensor.Tensor]", "tuple[Tensor, Tensor]"),
    ("Double(x)", "torch._tensor.Tensor", "Tensor"),
    ("ScaleBy(x, 3)", "torch._tensor.Tensor", "Tensor"),
    ("DoubleOnCpu(x)", "torch._tensor.Tensor", "Tensor"),
]
# (wrong call, what the mypy message must say, what pyright's must say): the argument's name,
# except that mypy numbers a positional argument of the wrong type.
WRONG = [
    ("BiasGelu(x)", '"bias"', '"bias"'),
    ("BiasGelu(x, x, approximat=True)", '"approximat"', '"approximat"'),
    ("BiasGelu(x, 'a')", 'Argument 2 to "BiasGelu"', '"bias"'),
    ("BiasGelu(x, x, approximate=1.5)", 'Argument "approximate"', '"approximate"'),
    ("MinMax(x)", 'Argument 1 to "MinMax"', '"xs"'),
    ("MinMax([x], scale='a')", 'Argument "scale"', '"scale"'),
    ("ScaleBy(x)", '"k"', '"k"'),
    ("ScaleBy(x, k=x)", 'Argument "k"', '"k"'),
]


def installed_checkout(env: dict[str, str], cwd: Path) -> Path | None:
    """The directory ``opclass`` is imported from by this interpreter outside the repository."""
    out = subprocess.run(
        [sys.executable, "-c", "import opclass, pathlib; print(pathlib.Path(opclass.__file__).resolve().parent.parent)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip()) if out.returncode == 0 else None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = installed_checkout(env, tmp_path)
    if found != ROOT:
        where = "not installed" if found is None else f"installed from {found}"
        pytest.skip(f"opclass is {where} in {sys.prefix}, not this checkout ({ROOT}) the README's way (pip install -e .)")
    (tmp_path / "install_lib.py").write_text(LIBRARY)
    lines = ["import torch", "from typing_extensions import reveal_type", "from install_lib import BiasGelu, DoubleOnCpu, Double, MinMax, ScaleBy", "x = torch.ones(2)"]
    lines += [f"reveal_type({call})" for call, _, _ in REVEALS]
    lines += [call for call, _, _ in WRONG]
    (tmp_path / "user.py").write_text("\n".join(lines) + "\n")
    return tmp_path


def by_line(project: Path, found: list[tuple[int, str]]) -> dict[str, list[str]]:
    """Messages keyed by the source line they are about."""
    source = (project / "user.py").read_text().splitlines()
    keyed: dict[str, list[str]] = {}
    for line, message in found:
        keyed.setdefault(source[line - 1], []).append(message)
    return keyed


def test_mypy_with_only_the_plugin(project: Path) -> None:
    (project / "mypy.ini").write_text("[mypy]\nplugins = opclass.mypy\nstrict = True\n")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--no-error-summary", "user.py", "install_lib.py"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    log = out.stdout + out.stderr
    found = []
    for text in out.stdout.splitlines():
        m = re.match(r"^(\S+\.py):(\d+): (error|note): (.*)$", text)
        assert m and m.group(1) == "user.py", log  # nothing inside opclass or the library
        found.append((int(m.group(2)), m.group(4)))
    keyed = by_line(project, found)
    for call, mypy_type, _ in REVEALS:
        assert keyed.pop(f"reveal_type({call})") == [f'Revealed type is "{mypy_type}"'], log
    for call, says, _ in WRONG:
        messages = keyed.pop(call)
        assert len(messages) == 1 and says in messages[0], (call, log)
    assert not keyed, log


def test_pyright_without_config(project: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, "user.py", "install_lib.py"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    report = json.loads(out.stdout)
    log = json.dumps(report["generalDiagnostics"], indent=1)
    assert {Path(d["file"]).name for d in report["generalDiagnostics"]} <= {"user.py"}, log
    keyed = by_line(project, [(d["range"]["start"]["line"] + 1, d["message"].splitlines()[0]) for d in report["generalDiagnostics"]])
    for call, _, pyright_type in REVEALS:
        assert keyed.pop(f"reveal_type({call})") == [f'Type of "{call}" is "{pyright_type}"'], log
    for call, _, says in WRONG:
        messages = keyed.pop(call)
        assert len(messages) == 1 and (f"parameter {says}" in messages[0] or f"named {says}" in messages[0]), (call, log)
    assert not keyed, log
