"""Sphinx configuration: the Markdown pages of docs/ (MyST) plus an API page built from docstrings.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (tests/test_docs_build.py
runs exactly this). No extension here needs the network.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Document the checkout, also when opclass is not installed (editable installs find it anyway).
sys.path.insert(0, str(ROOT))

import opclass  # noqa: E402

project = "opclass"
author = "opclass contributors"
copyright = "opclass contributors"
release = opclass.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

# The sources stay Markdown; the only reST is inside ```{eval-rst} blocks of api.md.
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: GitHub-style anchors, so links such as design.md#the-generated-call-function resolve
# the way they do when the Markdown is read on GitHub.
myst_heading_anchors = 3

# autodoc / napoleon: Google-style docstrings ("Args:", "Example:" with doctest blocks).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"opclass {release}"
html_theme_options = {
    "description": "PyTorch custom operators as classes",
    "fixed_sidebar": True,
    "sidebar_collapse": False,
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}


# Classes whose constructor signature would mislead: CustomOp is subclassed (its "arguments" are
# the class keywords its docstring lists), and OpRecord and HookContext are built by opclass,
# never by users (OpRecord's dataclass signature also has ``<factory>`` defaults, which are not
# Python). Their fields are listed as attributes instead.
_NO_SIGNATURE = {"opclass.CustomOp", "opclass.OpRecord", "opclass.HookContext"}


def _drop_signature(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, return_annotation: str | None
) -> tuple[None, None] | None:
    if what == "class" and name in _NO_SIGNATURE:
        return None, None
    return None


def setup(app: Any) -> None:
    app.connect("autodoc-process-signature", _drop_signature)
