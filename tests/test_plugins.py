"""Providers from other packages: a provider given as ``"module:function"`` is imported only when a
call first chooses it (or its availability is asked), a failed import or a function that does not
fit the op leaves it unavailable with the reason while the op keeps working, it may be added
before its op is defined and never fails the op's class statement; plugins (entry points in the
group ``opclass.providers`` of an installed distribution) add such providers before the first op
class is defined, can be turned off by name, and break nothing when they fail."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths

ROOT = Path(__file__).resolve().parent.parent


def make(ns: str) -> Any:
    """An op whose kernels tell themselves apart by what they add: ``default`` 0, ``plus1`` 1 (float64 only)."""

    class Shift(CustomOp, name=f"{ns}::shift"):
        @staticmethod
        def default(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k

        @staticmethod
        def abstract(x: Tensor, k: float = 0.0) -> Tensor:
            return torch.empty_like(x)

        @opclass.provider("cpu", supports=lambda x, k: x.dtype == torch.float64)
        @staticmethod
        def plus1(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 1

    return Shift


def ran(op: Any, x: Tensor) -> set[float]:
    """What each way of calling the op adds (the class call under each guard, ``torch.ops``): one value if they agree."""
    return {float((fn(x) - x).flatten()[0]) for fn in call_paths(op).values()}


def kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ns: str, source: str) -> str:
    """A vendor's module, importable and not imported yet: its name."""
    name = f"{ns}_kernels"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


ADDS_TEN = """
    def shift(x, k=0.0):
        return x + k + 10
"""


def test_a_lazy_provider_is_imported_when_a_call_first_chooses_it(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, ADDS_TEN)
    op = make(ns)
    opclass.add_provider(op, "vendor", f"{module}:shift", "cpu")
    # Listed as not loaded, where it came from, without importing it.
    assert f"vendor (cpu; opclass.add_provider from {__name__}; not loaded yet: {module}:shift)" in repr(op.record)
    assert f"  vendor (cpu): opclass.add_provider from {__name__}; not loaded yet: {module}:shift" in opclass.explain_providers(op).splitlines()
    assert ran(op, torch.zeros(2, dtype=torch.float64)) == {1.0}  # plus1 takes it: vendor is not reached
    with opclass.use_providers({op: ["default", "vendor"]}):
        assert ran(op, torch.zeros(2)) == {0.0}
    assert module not in sys.modules
    assert ran(op, torch.zeros(2)) == {10.0}  # plus1 declines: vendor is chosen, loaded, and runs on every route
    assert module in sys.modules
    assert "not loaded yet" not in repr(op.record)
    # Compiled again without the predicate that loaded it: a plain float32 call runs it inline.
    assert [e.name for e in op.record.kernel_for("cpu").choice.tried] == ["plus1", "vendor"]
    assert op.record.table.entry("vendor").options.supports is None
    assert {p.name: p.origin for p in opclass.providers_of(op)}["vendor"] == f"opclass.add_provider from {__name__}"
    opclass.set_provider_order(op, ["vendor", "default"])
    try:
        assert op.record.kernel_for("cpu").hook == "vendor"  # first, with no predicate: called directly
        assert ran(op, torch.zeros(2, dtype=torch.float64)) == {10.0}
    finally:
        opclass.set_provider_order(op, None)


def test_the_order_decides_whether_it_is_ever_imported(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, ADDS_TEN)
    op = make(ns)
    opclass.add_provider(op, "vendor", f"{module}:shift", "cpu")
    opclass.set_provider_order(op, ["default", "vendor"])
    try:
        assert ran(op, torch.zeros(2)) == {0.0}
        assert module not in sys.modules  # default takes every call: the choice never reaches it
        opclass.set_provider_order(op, ["vendor", "default"])
        assert module not in sys.modules  # compiling the choice imports nothing
        assert ran(op, torch.zeros(2)) == {10.0}
        assert module in sys.modules
    finally:
        opclass.set_provider_order(op, None)


def test_a_failed_import_leaves_it_unavailable_and_the_op_working(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, "import t_no_such_dependency_xyz\n" + textwrap.dedent(ADDS_TEN))
    crashing = kernels(tmp_path, monkeypatch, f"{ns}_crash", "raise RuntimeError('no device library here')\n")
    op = make(ns)
    opclass.add_provider(op, "vendor", f"{module}:shift", "cpu")
    opclass.add_provider(op, "crashing", f"{crashing}:shift", "cpu")
    assert ran(op, torch.zeros(2)) == {0.0}  # both chosen in turn, neither loads: default runs, on every route
    why = f"import of {module} failed: ModuleNotFoundError: No module named 't_no_such_dependency_xyz'"
    assert op.record.table.entry("vendor").available() == (False, why)
    info = {p.name: (p.available, p.why_not) for p in opclass.providers_of(op)}
    assert info["vendor"] == (False, why)
    assert info["crashing"] == (False, f"import of {crashing} failed: RuntimeError: no device library here")
    assert f"  vendor (cpu): not available: {why}" in opclass.explain_providers(op, torch.zeros(2)).splitlines()
    assert "vendor (cpu; unavailable; opclass.add_provider" in repr(op.record)
    assert [e.name for e in op.record.kernel_for("cpu").choice.tried] == ["plus1", "default"]  # the steady state asks nothing of them
    assert ran(op, torch.zeros(2)) == {0.0} and ran(op, torch.zeros(2, dtype=torch.float64)) == {1.0}
    # An order with it alone refuses the call, saying why.
    with opclass.use_providers({op: ["vendor"]}), pytest.raises(RuntimeError, match="vendor: not available: import of .* failed: ModuleNotFoundError"):
        op(torch.zeros(2))


def test_a_function_that_does_not_fit_the_op_is_unavailable_with_the_reason(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(
        tmp_path,
        monkeypatch,
        ns,
        """
        import torch

        def renamed(x, scale=1.0):
            return x + 10

        def typed(x: torch.Tensor, k: int = 0) -> torch.Tensor:
            return x + 10

        not_a_function = 3
        """,
    )
    op = make(ns)
    for name in ("renamed", "typed", "not_a_function", "missing"):
        opclass.add_provider(op, name, f"{module}:{name}", "cpu")
    assert ran(op, torch.zeros(2)) == {0.0}
    why = {p.name: p.why_not for p in opclass.providers_of(op)}
    assert why["renamed"] == f"{module}:renamed does not fit {ns}::shift: its parameters (x, scale) do not match the op's (x, k)"
    assert why["typed"] == f"{module}:typed does not fit {ns}::shift: parameter 'k' is annotated SymInt, but the op's schema says float"
    assert why["not_a_function"] == f"{module}:not_a_function is 3, not a function"
    assert why["missing"].startswith(f"{module} has no attribute 'missing'")


def test_its_own_available_is_asked_after_the_import(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, ADDS_TEN)
    op = make(ns)
    opclass.add_provider(op, "vendor", f"{module}:shift", "cpu", available=lambda: module in sys.modules)
    assert ran(op, torch.zeros(2)) == {10.0}


def test_a_lazy_provider_may_be_added_before_its_op_is_defined(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, ADDS_TEN)
    with pytest.raises(TypeError, match=rf"{ns}::shift is no live op, so the function cannot be checked against its signature: define the op first"):
        opclass.add_provider(f"{ns}::shift", "vendor", lambda x, k=0.0: x, "cpu")
    opclass.add_provider(f"{ns}::shift", "vendor", f"{module}:shift", "cpu")
    opclass.add_provider(f"{ns}::shift", "dropped", f"{module}:shift", "cpu")
    opclass.remove_provider(f"{ns}::shift", "dropped")  # taken back before the op exists
    op = make(ns)
    assert f"providers: plus1 (cpu; supports()), vendor (cpu; opclass.add_provider from {__name__}; not loaded yet: {module}:shift), default" in repr(op.record)
    assert module not in sys.modules
    assert ran(op, torch.zeros(2)) == {10.0}
    op = make(ns)  # it stays with the op's name through a redefinition
    assert ran(op, torch.zeros(2)) == {10.0}
    opclass.remove_provider(op, "vendor")
    assert ran(op, torch.zeros(2)) == {0.0}


def test_a_lazy_provider_never_fails_the_class_statement(ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = kernels(tmp_path, monkeypatch, ns, ADDS_TEN)
    opclass.add_provider(f"{ns}::shift", "plus1", f"{module}:shift", "cpu")  # the class has one of that name
    opclass.add_provider(f"{ns}::shift", "picky", f"{module}:shift", "cpu", supports=lambda x: True)  # takes too few
    opclass.add_provider(f"{ns}::shift", "vendor", f"{module}:shift", "cpu")
    with pytest.warns(UserWarning) as caught:
        op = make(ns)
    said = [str(w.message) for w in caught]
    assert any(f"the providers member 'plus1' that {__name__} added from outside the class is left out: {ns}::shift already has a providers member or hook named 'plus1'" in m for m in said), said
    assert any("member 'picky'" in m and "is left out" in m and "supports() cannot take the op's arguments" in m for m in said), said
    assert [e.name for e in op.record.table.entries] == ["plus1", "vendor", "default"]
    assert ran(op, torch.zeros(2, dtype=torch.float64)) == {1.0} and ran(op, torch.zeros(2)) == {10.0}
    # Added to a live op, the same mistake is the caller's, at once.
    with pytest.raises(OpDefinitionError, match="supports\\(\\) cannot take the op's arguments"), pytest.warns(UserWarning, match="member 'plus1'"):
        opclass.add_provider(op, "picky2", f"{module}:shift", "cpu", supports=lambda x: True)
    with pytest.raises(ValueError, match="names no function to load"):
        opclass.add_provider(op, "vendor2", "no colon here", "cpu")


# --------------------------------------------------------------------------- plugins, from a real wheel


def test_plugins_are_listed_and_the_variable_that_turns_them_off_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    opclass.load_plugins()  # loaded already (this process defined op classes): nothing more
    assert all(p.status in ("loaded", "disabled") or p.status.startswith("failed: ") for p in opclass.plugins())
    monkeypatch.setenv("OPCLASS_DISABLED_PLUGINS", "someone_elses")
    with pytest.raises(RuntimeError, match="OPCLASS_DISABLED_PLUGINS changed after opclass was imported"):
        opclass.plugins()


PLUGIN = """
import opclass

def register():
    opclass.add_provider("t_plugin_lib::shift", "vendor", "t_vendor_plugin.kernels:shift", "cpu")
    opclass.add_provider("t_plugin_lib::shift", "broken", "t_vendor_plugin.broken:shift", "cpu")

def explode():
    raise RuntimeError("the vendor's registration broke")
"""

LIBRARY = """
import torch
from torch import Tensor
import opclass

class Shift(opclass.CustomOp, name="t_plugin_lib::shift"):
    @staticmethod
    def default(x: Tensor, k: float = 0.0) -> Tensor:
        return x + k
"""

# Run in the venv that has the wheel: the library's module only, never the vendor's.
SCRIPT = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import t_plugin_lib
import opclass, torch
op, out = t_plugin_lib.Shift, {}
out["opclass"] = opclass.__file__
out["warnings"] = [str(w.message) for w in caught]
out["loaded before a call"] = sorted(m for m in sys.modules if m.startswith("t_vendor_plugin."))
out["repr"] = repr(op.record)
out["plugins"] = [list(p) for p in opclass.plugins()]
out["runs"] = float(op(torch.zeros(1))[0])
if "broken" in opclass.provider_order(op):
    with opclass.use_providers({op: ["broken", "default"]}):
        out["runs with broken first"] = float(op(torch.zeros(1))[0])
out["providers"] = [[p.name, p.available, p.why_not, p.origin] for p in opclass.providers_of(op)]
print(json.dumps(out))
"""


def _wheel(where: Path) -> Path:
    """A real wheel of ``t-vendor-plugin`` 1.0: a plugin that adds two lazy providers to
    ``t_plugin_lib::shift`` (one whose module cannot import), and one whose function raises."""
    files = {
        "t_vendor_plugin/__init__.py": PLUGIN,
        "t_vendor_plugin/kernels.py": "def shift(x, k=0.0):\n    return x + k + 10\n",
        "t_vendor_plugin/broken.py": "import t_vendor_missing_dependency\n",
        "t_vendor_plugin-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: t-vendor-plugin\nVersion: 1.0\n",
        "t_vendor_plugin-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test_plugins\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "t_vendor_plugin-1.0.dist-info/entry_points.txt": "[opclass.providers]\nt_vendor = t_vendor_plugin:register\nt_explodes = t_vendor_plugin:explode\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files["t_vendor_plugin-1.0.dist-info/RECORD"] = "\n".join([*record, "t_vendor_plugin-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = where / "t_vendor_plugin-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


@pytest.mark.slow
def test_a_plugin_from_an_installed_wheel_adds_its_providers(tmp_path: Path) -> None:
    # A venv whose site-packages sees this one's (torch) and the repository (opclass); the wheel
    # goes in with this venv's pip (--prefix): the new venv has none, and needs none.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    outer = Path(subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    (site / "outer.pth").write_text(f"{outer}\n{ROOT}\n")
    wheel = _wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation", "--disable-pip-version-check", "--prefix", str(venv), str(wheel)]
    subprocess.run(pip, check=True, capture_output=True)
    assert (site / "t_vendor_plugin" / "kernels.py").exists()
    (tmp_path / "t_plugin_lib.py").write_text(LIBRARY)
    (tmp_path / "script.py").write_text(SCRIPT)

    def run(**env: str) -> dict[str, Any]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OPCLASS_")}
        done = subprocess.run([str(python), "script.py"], cwd=tmp_path, env={**clean, **env}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]

    out = run()
    assert out["opclass"] == str(ROOT / "opclass" / "__init__.py")
    assert out["loaded before a call"] == []  # the plugin ran; neither kernels module was imported
    origin = "plugin t_vendor (t-vendor-plugin 1.0)"
    assert f"vendor (cpu; {origin}; not loaded yet: t_vendor_plugin.kernels:shift)" in out["repr"]
    assert out["plugins"] == [
        ["t_explodes", "t-vendor-plugin", "1.0", "t_vendor_plugin:explode", "failed: RuntimeError: the vendor's registration broke"],
        ["t_vendor", "t-vendor-plugin", "1.0", "t_vendor_plugin:register", "loaded"],
    ]
    assert any(w.startswith("opclass plugin t_explodes (t-vendor-plugin 1.0, t_vendor_plugin:explode) failed: RuntimeError: the vendor's registration broke") for w in out["warnings"])
    assert out["runs"] == 10.0  # the order chooses the plugin's provider
    assert out["runs with broken first"] == 0.0  # its module cannot import: on to default
    assert out["providers"] == [
        ["vendor", True, "", origin],
        ["broken", False, "import of t_vendor_plugin.broken failed: ModuleNotFoundError: No module named 't_vendor_missing_dependency'", origin],
        ["default", True, "", "own kernel"],
    ]

    off = run(OPCLASS_DISABLED_PLUGINS="t_vendor,t_explodes,t_vendr")
    assert [p[4] for p in off["plugins"]] == ["disabled", "disabled"]
    assert off["warnings"] == ["OPCLASS_DISABLED_PLUGINS names 't_vendr', which is no installed plugin: did you mean 't_vendor'?"]
    assert off["runs"] == 0.0 and [p[0] for p in off["providers"]] == ["default"]
