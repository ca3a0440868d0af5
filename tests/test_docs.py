"""The documentation runs: every ```python block in docs/ and the README, and every docstring example
in opclass/.

Blocks of one Markdown file share one namespace and run in order, so a page reads (and runs) top
to bottom. Blocks fenced ```text are shown, never run. A ```python block followed directly by a
```pytb block shows a mistake and the error it gets: the python block must raise, and the exception
as Python prints it must match the pytb block (after its ``Traceback ...`` and ``  ...`` lines;
``...`` matches any text, as in doctest), so the error text a page shows cannot go stale.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import pkgutil
import re
import subprocess
import sys
import traceback
import types
from pathlib import Path

import pytest
import torch

import opclass
from opclass.define import spec as _spec
from opclass.install import record as _records

from _versions import missing_opaque_values, missing_tags, tags_in

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DOC_FILES = sorted(DOCS.rglob("*.md"))
MODULES = [opclass] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(opclass.__path__, "opclass.")]


@dataclasses.dataclass(frozen=True)
class Block:
    """One ```python block: its first line number, its source, and the error it must raise, if any."""

    line: int
    source: str
    raises: str | None = None


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of ``path``, in order, each with the text of a ```pytb block right after it."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    start: int | None = None
    fence = ""
    previous: tuple[str, int] = ("", -1)  # the last closed block's fence and closing line
    for i, line in enumerate(lines):
        stripped = line.strip()
        if start is None:
            if stripped.startswith("```"):
                fence = stripped[3:].strip()
                start = i + 1
        elif stripped == "```":
            body = "\n".join(lines[start:i]) + "\n"
            if fence == "python":
                blocks.append(Block(start, body))
            elif fence == "pytb":
                adjacent = previous[0] == "python" and all(not s.strip() for s in lines[previous[1] + 1 : start - 1])
                assert adjacent, f"{path}:{start}: a pytb block must follow the python block that raises it"
                blocks[-1] = dataclasses.replace(blocks[-1], raises=expected_error(body))
            previous = (fence, i)
            start = None
    assert start is None, f"{path}: unclosed code fence opened at line {start}"
    return blocks


def expected_error(pytb: str) -> str:
    """The exception lines of a ```pytb block: what follows its ``Traceback`` header and ``  ...``."""
    lines = pytb.splitlines()
    if lines and lines[0].startswith("Traceback (most recent call last):"):
        lines = lines[lines.index("  ...") + 1 :]
    return "\n".join(lines) + "\n"


def error_matches(expected: str, exc: BaseException) -> bool:
    """``exc`` as Python prints its last line(s) matches ``expected`` (``...`` matches anything)."""
    got = "".join(traceback.format_exception_only(type(exc), exc))
    return doctest.OutputChecker().check_output(expected, got, doctest.ELLIPSIS)


def run_blocks(path: Path, blocks: list[Block], namespace: dict[str, object]) -> None:
    """Run ``blocks`` in order in ``namespace``; a block with ``raises`` must raise that error."""
    for block in blocks:
        # Pad with blank lines so tracebacks point at the right line of the .md file.
        code = compile("\n" * block.line + block.source, str(path), "exec", dont_inherit=True)
        if block.raises is None:
            exec(code, namespace)  # noqa: S102 - our own documentation
            continue
        try:
            exec(code, namespace)  # noqa: S102
        except Exception as e:  # noqa: BLE001 - any exception; its text is what is checked
            got = "".join(traceback.format_exception_only(type(e), e))
            assert error_matches(block.raises, e), f"{path}:{block.line}: the page shows\n{block.raises}but the block raised\n{got}"
        else:
            raise AssertionError(f"{path}:{block.line}: the block should raise\n{block.raises}but raised nothing")


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
    before = set(_records._LIVE)
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    left_out: list[int] = []
    unavailable: set[str] = set()  # names only the left-out blocks define
    needed: set[str] = set()  # the missing tags the left-out blocks spell
    runnable: list[Block] = []
    for block in python_blocks(path):
        bound, read = _names(block.source)
        tags = tags_in(block.source)
        if missing_tags(*tags) is not None or read & unavailable:
            needed.update(tags)
            left_out.append(block.line)
            unavailable |= bound
            continue
        unavailable -= bound
        runnable.append(block)
    run_blocks(path, runnable, namespace)
    leaked = set(_records._LIVE) - before
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


@pytest.mark.slow
def test_readme_blocks_run() -> None:
    """Each ```python block of the README runs on its own (the custom_op and opclass forms of one op)."""
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) >= 2
    for block in blocks:
        proc = subprocess.run([sys.executable, "-c", block.source], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"README.md:{block.line}\n{proc.stderr}"


def test_error_blocks_are_checked(tmp_path: Path) -> None:
    """A pytb block is compared with what its python block raises: wrong text or no error fails."""
    page = tmp_path / "page.md"
    shown = "```python\nint('x')\n```\n\n```pytb\nTraceback (most recent call last):\n  ...\n{}\n```\n"
    page.write_text(shown.format("ValueError: invalid literal for int() with base 10: ..."), encoding="utf-8")
    run_blocks(page, python_blocks(page), {})
    page.write_text(shown.format("ValueError: something else"), encoding="utf-8")
    with pytest.raises(AssertionError, match="the page shows"):
        run_blocks(page, python_blocks(page), {})
    page.write_text(shown.format("ValueError: ...").replace("int('x')", "int('1')"), encoding="utf-8")
    with pytest.raises(AssertionError, match="raised nothing"):
        run_blocks(page, python_blocks(page), {})
    page.write_text("```text\nx\n```\n\n```pytb\nValueError: x\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="must follow the python block"):
        python_blocks(page)


def test_op_record_fields_are_documented(ns: str) -> None:
    """Every field of ``MyOp.record`` has a ``#:`` description, which the API page renders."""
    from sphinx.pycode import ModuleAnalyzer

    class Neg(opclass.CustomOp, name=f"{ns}::neg"):
        @staticmethod
        def default(x: torch.Tensor) -> torch.Tensor:
            return -x

    docs = {**ModuleAnalyzer.for_module("opclass.define.spec").find_attr_docs(), **ModuleAnalyzer.for_module("opclass.install.record").find_attr_docs()}
    described = {name for (cls, name), lines in docs.items() if cls in ("OpSpec", "OpRecord") and "".join(lines).strip()}
    fields = {f.name for f in dataclasses.fields(_spec.OpSpec)} | set(vars(Neg.record))
    assert fields - described == set()
