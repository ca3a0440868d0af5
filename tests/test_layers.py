"""The house: layers import one way, the install layer names no hook, each rule is written once
(the argument table, the type table, the plain key sets), and docs/design.md's map of the
package is the package as it is."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import opclass
from _marks import needs_native

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "opclass"

# Lower first; a module may import its own layer and the ones below it, never one above.
_LAYERS = {"core": 0, "errors": 0, "define": 1, "install": 2, "builtin_hooks": 3, "callpath": 3, "lifecycle": 4, "_op": 5}
# Layers of equal height that must not import each other.
_APART = {("builtin_hooks", "callpath"), ("callpath", "builtin_hooks")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in _LAYERS else None


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        found[".".join(p for p in rel.parts if p != "__init__")] = path
    return found


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every opclass module ``path`` imports at run time (function-level imports included;
    imports under ``if TYPE_CHECKING:`` are for types only and left out)."""
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("opclass")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("opclass"):
                found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in _modules() else base, node.lineno) for a in node.names]
    return found


def test_layers_import_one_way() -> None:
    wrong = []
    for module, path in _modules().items():
        here = _layer(module)
        if here is None:
            continue  # the public face and the tools sit on top
        for imported, line in _imports(path, module):
            there = _layer(imported)
            if there is not None and (_LAYERS[there] > _LAYERS[here] or (here, there) in _APART):
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {imported} ({there})")
    assert not wrong, "\n".join(wrong)


def _strings(tree: ast.AST) -> list[tuple[str, int]]:
    """The string constants of code (docstrings left out), f-strings' literal parts included."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [(n.value, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_the_install_layer_names_no_hook() -> None:
    """The install layer runs whatever hooks a spec carries: no built-in hook's name appears in
    its code, neither as a key (``hooks["abstract"]``, ``kernels["cpu"]``) nor as the user's
    method in a message (``Cls.backward``). (Words such as "autograd" in prose are no names, and
    nor are the provider modes' names, ``reference`` among them, declared once in ``orders.MODES``,
    or the platforms' names in orders.py, which declares them.)"""
    from opclass.core.names import HOOK_KINDS
    from opclass.install.orders import MODES, PLATFORMS

    reference = re.compile(rf"\.({'|'.join(HOOK_KINDS)})(?![A-Za-z_])")
    found = []
    for path in sorted((PACKAGE / "install").glob("*.py")):
        for text, line in _strings(ast.parse(path.read_text())):
            if path.name == "orders.py" and text in (*PLATFORMS, "hip"):
                continue
            if (text in HOOK_KINDS and text not in MODES) or reference.search(text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    assert not found, "\n".join(found)


def test_argument_facts_are_read_from_the_argument_table() -> None:
    """Whether an argument is written, and its type as text, are asked of the table
    (define/arguments.py) or the type table (core/types.py) only."""
    allowed = {PACKAGE / "define" / "arguments.py", PACKAGE / "core" / "types.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "is_write":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .is_write")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Attribute) and arg.attr in ("type", "real_type"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: str(....{arg.attr})")
    assert not found, "\n".join(found)


@needs_native
def test_the_native_guard_shares_the_plain_key_sets_and_codes() -> None:
    """csrc/guard.cpp's key sets and codes are the ones core/types.py gives the Python side."""
    from opclass.callpath import pyguard
    from opclass.core import native, types

    facts = native.native_module().facts()  # type: ignore[union-attr]
    for device in types.FAST_DEVICES:
        assert facts[device] == tuple(ks.raw_repr() for ks in types.plain_keysets(device)), device
    assert facts["codes"] == (types.CPU, types.CUDA, types.GRAD)
    assert facts["included"] == max(pyguard.INCLUDED_OK)  # BackendSelect and ADInplaceOrView


# --------------------------------------------------------------------------- docs/design.md

_DESIGN = ROOT / "docs" / "design.md"


def _design_counts() -> dict[str, int]:
    """``path -> lines`` from the design page's map of the package."""
    block = _DESIGN.read_text().split("```text\nopclass/", 1)[1].split("```", 1)[0]
    counts, folder = {}, ""
    for line in block.splitlines()[1:]:
        m = re.match(r"^( +)(\S+)\s+(\d+)\s", line)
        if m is None:
            continue
        name = m.group(2)
        if "/" in name:
            folder = name.split("/")[0]
            rel = name
        else:
            rel = name if len(m.group(1)) <= 2 else f"{folder}/{name}"
        counts[rel] = int(m.group(3))
    return counts


def test_design_map_counts_every_file_and_its_lines() -> None:
    counts = _design_counts()
    files = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*") if p.suffix in (".py", ".cpp")}
    assert set(counts) == set(files), f"missing from the map: {sorted(set(files) - set(counts))}; gone: {sorted(set(counts) - set(files))}"
    wrong = {name: (counts[name], files[name]) for name in files if counts[name] != files[name]}
    assert not wrong, f"design.md says / the file has: {wrong}"
    total = int(re.search(r"(\d[\d,]*) lines of Python", _DESIGN.read_text()).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert total == sum(n for name, n in files.items() if name.endswith(".py"))


@pytest.mark.slow
@needs_native
def test_design_walks_are_the_walks_tools_walk_prints() -> None:
    """The walk table's switches and modules are what ``python tools/walk.py`` prints."""
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "walk.py")], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    printed = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(r"^(.+?): (\d+) switches, (\d+) modules:", out, re.M)}
    table = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(r"^\| (.+?) \| (\d+) \| (\d+) \|", _DESIGN.read_text(), re.M)}
    assert printed and table == printed, f"design.md: {table}\nwalk.py: {printed}"
    assert opclass.guard_backend() == "native"
