"""``import opclass.mypy`` stays torch-free; ``import opclass`` still gives every public name.

mypy imports the plugin in every run, so opclass's ``__init__`` imports its public names (and
torch with them) only when one is first used.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import opclass
from opclass import _public

ROOT = Path(__file__).resolve().parent.parent


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
def test_mypy_plugin_imports_without_torch() -> None:
    assert run("import sys, opclass.mypy; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))") == "[]"


@pytest.mark.slow
def test_star_import_gives_every_public_name() -> None:
    code = "import opclass; ns = {}; exec('from opclass import *', ns); print(sorted(set(ns) - {'__builtins__'}) == sorted(opclass.__all__))"
    assert run(code) == "True"


@pytest.mark.slow
def test_first_public_name_brings_the_built_in_hooks() -> None:
    assert run("import opclass; print('cpu' in opclass.hooks())") == "True"


@pytest.mark.slow
def test_no_subpackage_shadows_a_public_name() -> None:
    """Importing a tool first (it imports the layers) leaves every public name as it is: a
    subpackage named like one would replace it on the package (``opclass.hooks`` once did)."""
    code = "import opclass.testing, opclass; print(all(getattr(opclass, n) is getattr(opclass._public, n) for n in opclass.__all__))"
    assert run(code) == "True"
    subpackages = {p.name for p in (ROOT / "opclass").iterdir() if (p / "__init__.py").exists()}
    assert not subpackages & set(opclass.__all__)


def test_public_names_are_the_lazily_imported_ones() -> None:
    assert all(getattr(opclass, name) is getattr(_public, name) for name in opclass.__all__)
    assert set(opclass.__all__) <= set(dir(opclass))


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        opclass.CustomOpp  # type: ignore[attr-defined]
    except AttributeError as e:
        assert str(e) == "module 'opclass' has no attribute 'CustomOpp'"
    else:
        raise AssertionError("expected AttributeError")
