"""Which guard is active, how it is chosen and built (``python -m opclass.native``), and what the
native guard accepts."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import opclass
from opclass.core import native as _native

from _marks import needs_native

ROOT = Path(__file__).resolve().parent.parent
PROBE = textwrap.dedent(
    """
    import torch, opclass
    from torch import Tensor
    class Op(opclass.CustomOp, name="guard_probe::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1
    assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
    print(opclass.guard_backend(), "|", opclass.guard_info(), "|", type(Op).__mro__[1].__name__)
    """
)


def _probe(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})


@pytest.mark.slow
def test_forced_python_guard() -> None:
    out = _probe(OPCLASS_GUARD="python")
    assert out.returncode == 0, out.stderr
    backend, info, meta_base = (s.strip() for s in out.stdout.split("|"))
    assert backend == "python" and info == "python: OPCLASS_GUARD=python" and meta_base == "type"


@pytest.mark.slow
def test_auto_without_a_build_and_background_builds_off_uses_python(tmp_path: Path) -> None:
    out = _probe(OPCLASS_GUARD="auto", OPCLASS_CACHE_DIR=str(tmp_path), OPCLASS_NATIVE_BUILD="off")
    assert out.returncode == 0, out.stderr
    backend, info, _ = (s.strip() for s in out.stdout.split("|"))
    assert backend == "python" and "not built (run: python -m opclass.native)" in info
    assert not any(tmp_path.iterdir())  # nothing was compiled


BACKGROUND_PROBE = textwrap.dedent(
    """
    import sys, time, torch, opclass
    from opclass.core import native as _native
    from torch import Tensor
    start = time.perf_counter()
    class Op(opclass.CustomOp, name="guard_probe::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1
    defined = time.perf_counter() - start
    print("defined in", defined, file=sys.stderr)
    assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
    print(opclass.guard_backend(), "|", opclass.guard_info())
    assert _native.wait_for_build(300)
    print(opclass.guard_backend(), "|", opclass.guard_info())
    assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
    assert torch.equal(Op(torch.zeros(2, requires_grad=True)), torch.ones(2))
    print("_guard(_spec" in __import__("inspect").getsource(Op.__dict__["_opclass_call"]))
    """
)


@pytest.mark.slow
@needs_native
def test_auto_builds_in_the_background_and_switches_live_classes(tmp_path: Path) -> None:
    # The build here starts from this machine's object files, so the background build only links.
    module = _native.native_module()
    assert module is not None and module.__file__ is not None
    built = Path(module.__file__).parent
    shutil.copytree(built, tmp_path / built.name, ignore=shutil.ignore_patterns("*.so", "lock"))
    out = subprocess.run(
        [sys.executable, "-c", BACKGROUND_PROBE], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "OPCLASS_GUARD": "auto", "OPCLASS_CACHE_DIR": str(tmp_path)}, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    before, after, uses_native = out.stdout.strip().splitlines()
    assert before.startswith("python | python: not built yet; building in the background into ")
    assert after.startswith("native | native: ") and "(built in the background; 1 op classes switched to it)" in after
    assert uses_native == "True"  # the class defined before the build now runs the native guard


@pytest.mark.slow
def test_bad_mode_is_an_error() -> None:
    out = _probe(OPCLASS_GUARD="fastest")
    assert out.returncode != 0 and "OPCLASS_GUARD='fastest': use auto, native or python" in out.stderr


@pytest.mark.slow
@needs_native
def test_native_is_used_when_built() -> None:
    out = _probe(OPCLASS_GUARD="native")
    assert out.returncode == 0, out.stderr
    backend, info, meta_base = (s.strip() for s in out.stdout.split("|"))
    assert backend == "native" and info.startswith("native: ") and meta_base == "MetaBase"


def _guard(spec: bytes, *values: object) -> int:
    module = _native.native_module()
    assert module is not None
    return int(module.guard(spec, *values))


@needs_native
@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: torch.ones(2), 1),
        (lambda: torch.ones(2, requires_grad=True), 5),
        (lambda: torch.nn.Parameter(torch.ones(2)), 5),
        (lambda: torch.ones(4)[::2], 1),  # non-contiguous is still plain
        (lambda: torch.ones(2, device="meta"), 0),
        (lambda: torch.ones(2).to_sparse(), 0),
        (lambda: torch.ones(2, dtype=torch.cfloat).conj(), 0),
        (lambda: torch.ones(2, dtype=torch.cfloat).conj().imag, 0),  # negative bit
        (lambda: torch.ones(2).as_subclass(type("Sub", (torch.Tensor,), {})), 0),
        (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), 0),
        (lambda: 3.0, 0),
    ],
    ids=["plain", "requires_grad", "parameter", "strided_view", "meta", "sparse", "conj", "neg", "subclass", "quantized", "not_a_tensor"],
)
def test_native_guard_classifies_tensors(make: object, expected: int) -> None:
    assert _guard(b"T", make()) == expected  # type: ignore[operator]


@needs_native
def test_native_guard_specs_and_mixes() -> None:
    x, g = torch.ones(2), torch.ones(2, requires_grad=True)
    assert _guard(b"TO", x, None) == 1
    assert _guard(b"T", None) == 0  # None where a Tensor is required
    assert _guard(b"LX", [x, g], 2.0) == 5
    assert _guard(b"M", [x, None]) == 1
    assert _guard(b"T", x.to("meta")) == 0 and _guard(b"TT", x, x.to("meta")) == 0  # mixed devices
    assert _guard(b"O", None) == 0  # no Tensor at all: nothing to pick a device from
    with pytest.raises(TypeError, match="spec length"):
        _guard(b"TT", x)


@needs_native
def test_native_guard_reads_thread_local_state() -> None:
    x, g = torch.ones(2), torch.ones(2, requires_grad=True)
    with torch.no_grad():
        assert _guard(b"T", g) == 1
    with torch.inference_mode():
        assert _guard(b"T", g) == 1 and _guard(b"T", torch.ones(2)) == 1
    with torch._C._AutoDispatchBelowAutograd():
        assert _guard(b"T", g) == 1
    with torch.device("meta"):
        assert _guard(b"T", x) == 0  # a TorchFunctionMode
    with torch.profiler.profile():
        assert _guard(b"T", x) == 0
    with torch.autograd.forward_ad.dual_level():
        assert _guard(b"T", x) == 0
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert _guard(b"T", x) == 0
    seen: list[int] = []
    torch.vmap(lambda t: seen.append(_guard(b"T", t)) or t)(torch.ones(2, 2))
    assert seen == [0]


@pytest.mark.slow
def test_background_build_without_a_compiler_keeps_the_python_guard(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        """
        import torch, opclass
        from opclass.core import native as _native
        from torch import Tensor
        class Op(opclass.CustomOp, name="guard_probe::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
        assert not _native.wait_for_build(300)
        assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
        print(opclass.guard_info())
        """
    )
    env = {**os.environ, "OPCLASS_GUARD": "auto", "OPCLASS_CACHE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-compiler")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("python: background build failed: native guard not built (")
    assert "no-compiler" in out.stdout  # the compiler it could not run


@pytest.mark.slow
def test_python_guard_self_test_leaves_torch_as_it_found_it() -> None:
    probe = textwrap.dedent(
        """
        import torch
        from torch import _C
        from opclass.callpath import pyguard as _pyguard
        before = (_C._dispatch_tls_local_include_set(), _C._dispatch_tls_local_exclude_set(), torch.is_grad_enabled())
        assert _pyguard.factory(wait=True) is not None, _pyguard._status
        after = (_C._dispatch_tls_local_include_set(), _C._dispatch_tls_local_exclude_set(), torch.is_grad_enabled())
        assert before == after, (before, after)
        assert (torch.randn(2) + 1).device.type == "cpu"  # factory functions still dispatch normally
        print(_pyguard._status)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "cached checks (torch._C._dynamo.guards.TensorGuards)"


@pytest.mark.slow
@pytest.mark.parametrize("state", ["inference_mode", "autocast", "no_grad"])
def test_python_guard_self_test_passes_whatever_state_the_first_call_is_in(state: str) -> None:
    probe = textwrap.dedent(
        f"""
        import torch, opclass
        from opclass.callpath import pyguard as _pyguard
        from torch import Tensor
        class Op(opclass.CustomOp, name="guard_probe::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
        state = {{"inference_mode": torch.inference_mode, "autocast": lambda: torch.autocast("cpu"), "no_grad": torch.no_grad}}[{state!r}]
        with state():
            assert torch.equal(Op(torch.zeros(2)), torch.ones(2))  # the first call: a miss, starts the self-test
        _pyguard.factory(wait=True)
        print(_pyguard._status)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "OPCLASS_GUARD": "python"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "cached checks (torch._C._dynamo.guards.TensorGuards)"


@pytest.mark.slow
def test_python_guard_first_calls_do_not_wait_for_the_self_test() -> None:
    # The self-test is held until released: calls meanwhile run the exact check, record nothing
    # and give the right results; once it is over, the next call records.
    probe = textwrap.dedent(
        """
        import threading, torch, opclass
        from opclass.callpath import pyguard as _pyguard
        from opclass.callpath import classcall as _codegen
        from torch import Tensor
        release = threading.Event()
        real = _pyguard._self_test
        _pyguard._self_test = lambda factory: release.wait() and real(factory)
        class Op(opclass.CustomOp, name="guard_probe::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
        slots = dict(zip(_codegen.call_function(Op).__code__.co_freevars, (c.cell_contents for c in _codegen.call_function(Op).__closure__)))["_s"]
        for _ in range(3):
            assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
        assert slots[2] == 0, slots
        print(_pyguard._status)
        release.set()
        assert _pyguard.factory(wait=True) is not None, _pyguard._status
        assert torch.equal(Op(torch.zeros(2)), torch.ones(2))
        assert slots[2] == 1, slots
        print(_pyguard._status)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "OPCLASS_GUARD": "python"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["self-test running: calls run the exact check until it is over", "cached checks (torch._C._dynamo.guards.TensorGuards)"]


# --------------------------------------------------------------------------- python -m opclass.native


def test_native_says_when_it_reused_a_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from opclass import native
    from opclass.core import native as core_native

    library = tmp_path / "opclass_guard.so"
    library.write_bytes(b"")
    monkeypatch.setattr(core_native, "built", lambda: library)
    monkeypatch.setattr(core_native, "load", lambda mode=None: None)
    monkeypatch.setattr(core_native, "build", lambda verbose=False: library)  # nothing rebuilt
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        native.main([])
    assert out.getvalue().splitlines()[0] == f"opclass: native guard up to date (nothing to rebuild): {library}"

    def rebuild(verbose: bool = False) -> Any:
        library.write_bytes(b"new")
        import os

        os.utime(library, ns=(1, 1))
        return library

    monkeypatch.setattr(core_native, "build", rebuild)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        native.main([])
    assert out.getvalue().splitlines()[0] == f"opclass: native guard built: {library}"
