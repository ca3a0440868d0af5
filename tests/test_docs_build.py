"""The documentation site builds: Sphinx + MyST over docs/, warnings as errors.

The same command as in docs/getting-started.md, into a temporary directory. (tests/test_docs.py
runs the pages' code; this checks that they render, link and cross-reference cleanly, and that
the API page documents every public name.)
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import opclass

pytestmark = pytest.mark.slow  # Sphinx runs in a subprocess

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [m for m in ("sphinx", "myst_parser") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{missing} not installed: they come with the test extra, pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("html")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS), str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    # With -W every warning is an error; they are on stderr, one per line, with file and line.
    assert proc.returncode == 0, f"the docs build failed (rc {proc.returncode}):\n{proc.stderr[-8000:]}"
    return out


def test_every_page_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).with_suffix(".html") for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    missing = [str(p) for p in pages if not (site / p).is_file()]
    assert not missing, missing
    for key in ("index.html", "getting-started.html", "migration.html", "api.html", "performance.html"):
        assert (site / key).is_file(), key


def test_api_page_documents_every_public_name(site: Path) -> None:
    text = (site / "api.html").read_text(encoding="utf-8")
    assert "OpDefinitionError" in text
    ids = set(re.findall(r'id="([^"]+)"', text))
    missing = [name for name in opclass.__all__ if f"opclass.{name}" not in ids]
    assert not missing, f"docs/api.md does not document {missing}"
    assert "module-opclass.errors" in ids


def test_migration_page_compares_both_apis(site: Path) -> None:
    text = html.unescape((site / "migration.html").read_text(encoding="utf-8"))
    for construct in ("register_fake", "register_autograd", "register_kernel", "register_vmap",
                      "register_autocast", "register_torch_dispatch", "opcheck", "autograd.Function"):
        assert construct in text, construct
