"""The documentation runs: every ```python block in docs/, and every docstring example in opclass/.

Blocks of one Markdown file share one namespace and run in order, so a page reads (and runs) top
to bottom. Blocks fenced ```text are shown, never run.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
import re
import types
from pathlib import Path

import pytest

import opclass
from opclass import _record

from _versions import missing_opaque_values, missing_tags, tags_in

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DOC_FILES = sorted(DOCS.rglob("*.md"))
MODULES = [opclass] + [importlib.import_module(f"opclass.{m.name}") for m in pkgutil.iter_modules(opclass.__path__)]


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(first line number, source)`` of each ```python block of ``path``, in order."""
    blocks: list[tuple[int, str]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    start: int | None = None
    fence = ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if start is None:
            if stripped.startswith("```"):
                fence = stripped[3:].strip()
                start = i + 1
        elif stripped == "```":
            if fence == "python":
                blocks.append((start, "\n".join(lines[start:i]) + "\n"))
            start = None
    assert start is None, f"{path}: unclosed code fence opened at line {start}"
    return blocks


def test_docs_exist() -> None:
    assert DOC_FILES, "no Markdown files under docs/"


def _names(source: str) -> tuple[set[str], set[str]]:
    """The names a block binds at top level, and the names it reads."""
    tree = ast.parse(source)
    bound = {t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign)) for t in ast.walk(node) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    bound |= {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return bound, read


@pytest.mark.parametrize("path", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_doc_file(path: Path) -> None:
    """Run the file's python blocks in one fresh namespace; they must leave no op behind.

    A block that tags an op with a tag this torch lacks (torch 2.11, 2.12: ``Tag.inplace``, ``Tag.out``)
    is left out, with the blocks that read what it defines; the rest run, then the test is
    reported skipped, naming the blocks."""
    if path.name == "config-objects.md" and missing_opaque_values() is not None:
        pytest.skip(missing_opaque_values())
    before = set(_record._LIVE)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    left_out: list[int] = []
    unavailable: set[str] = set()  # names only the left-out blocks define
    needed: set[str] = set()  # the missing tags the left-out blocks spell
    for start, source in python_blocks(path):
        bound, read = _names(source)
        tags = tags_in(source)
        if missing_tags(*tags) is not None or read & unavailable:
            needed.update(tags)
            left_out.append(start)
            unavailable |= bound
            continue
        unavailable -= bound
        # Pad with blank lines so tracebacks point at the right line of the .md file.
        code = compile("\n" * start + source, str(path), "exec", dont_inherit=True)
        exec(code, namespace)  # noqa: S102 - our own documentation
    leaked = set(_record._LIVE) - before
    assert not leaked, f"{path.name} leaves ops defined: {sorted(leaked)}; end it with opclass.remove_namespace(...)"
    if left_out:
        pytest.skip(f"{missing_tags(*sorted(needed))}: left out the blocks at lines {', '.join(map(str, left_out))}; the other blocks ran")


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples(module: types.ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module.__name__} (see output above)"


def test_hooks_table_lists_every_hook() -> None:
    """docs/guide/hooks.md has a table row for each registered hook (and none that does not exist)."""
    text = (DOCS / "guide" / "hooks.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    builtin = [name for name, hook in opclass.hooks().items() if hook.install.__module__.startswith("opclass.")]
    assert rows == builtin, (rows, builtin)
