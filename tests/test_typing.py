"""Static typing: the package passes ``mypy --strict``; op calls type-check under mypy and pyright.

The case files in ``tests/typing_cases/`` carry their expected diagnostics as comments on the lines
above each statement: ``# M: <severity>: <message>  [<code>]`` for mypy with ``opclass.mypy``, and
``# P: <severity>: <first line of message>  [<rule>]`` for pyright (``# P: none``: pyright cannot
see the mistake). Every diagnostic the tools print must be expected and every expected one printed. Cases: correct calls (with revealed
types), wrong types, counts and keywords, optional and keyword-only args, a multi-output tuple,
list args, a mutating op, ops imported from another module, a variant subclass, ``schema=``
without annotations, an abstract base, ``Callable`` assignment, a provider function, and class keywords.
"""

from __future__ import annotations

import inspect
import json
import pydoc
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import torch
from torch import Tensor

from opclass import CustomOp

ROOT = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "typing_cases"
CASE_FILES = ("calls.py", "errors.py", "keywords.py")
Diagnostics = dict[str, set[tuple[int, str]]]  # file -> {(line, "severity: message  [code]")}


def expected(marker: str) -> Diagnostics:
    """The ``# M:`` or ``# P:`` comments of each case file, attached to the next code line."""
    found: Diagnostics = {}
    for name in CASE_FILES:
        pending: list[str] = []
        found[name] = set()
        for lineno, line in enumerate((CASES / name).read_text().splitlines(), 1):
            if line.startswith(f"# {marker}: "):
                pending.append(line[len(f"# {marker}: "):])
            elif line.strip() and not line.startswith("#"):
                found[name].update((lineno, text) for text in pending)
                pending = []
    return found


def copy_cases(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    shutil.copytree(CASES, cases)
    return cases


def run_mypy(cases: Path, config: Path, cache: Path) -> tuple[Diagnostics, str]:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache), "--no-error-summary", *CASE_FILES],
        cwd=cases,
        capture_output=True,
        text=True,
    )
    assert "INTERNAL ERROR" not in out.stdout + out.stderr, out.stdout + out.stderr
    got: Diagnostics = {name: set() for name in CASE_FILES}
    for line in out.stdout.splitlines():
        m = re.match(r"^(\w+\.py):(\d+): (error|note): (.*)$", line)
        assert m, f"unexpected mypy output: {line!r}\n{out.stdout}{out.stderr}"
        name, lineno, severity, message = m.groups()
        if re.fullmatch(r'"\w+" defined in "\w+"', message):
            continue  # a context note whose presence depends on the cache state
        got[name].add((int(lineno), f"{severity}: {message}"))
    return got, out.stdout + out.stderr


def mypy_config(tmp_path: Path, plugin: bool) -> Path:
    # mypy_path: this checkout, which need not be the one installed in the running environment
    # (tests/test_typing_install.py checks the installed one, with no mypy_path).
    config = tmp_path / ("mypy-plugin.ini" if plugin else "mypy-bare.ini")
    config.write_text(
        "[mypy]\n"
        + ("plugins = opclass.mypy\n" if plugin else "")
        + f"strict = True\nmypy_path = {ROOT}\n"
        "[mypy-torch.*]\nfollow_imports = silent\n"
        "[mypy-opclass.*]\nfollow_imports = silent\n"
    )
    return config


@pytest.mark.slow
def test_package_passes_mypy_strict() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"), "--no-incremental"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout


def test_ships_py_typed() -> None:
    assert (ROOT / "opclass" / "py.typed").is_file()


@pytest.mark.slow
def test_mypy_plugin_diagnostics_and_incremental_cache(tmp_path: Path) -> None:
    cases = copy_cases(tmp_path)
    config, cache = mypy_config(tmp_path, plugin=True), tmp_path / "cache"
    got, log = run_mypy(cases, config, cache)
    assert got == expected("M"), log
    # A warm cache: ops.py now comes from mypy's cache, and the signatures must survive it.
    with open(cases / "calls.py", "a") as f:
        f.write("reveal_type(Scale)\n")
    again, log = run_mypy(cases, config, cache)
    last = len((cases / "calls.py").read_text().splitlines())
    signature = 'def (x: torch._tensor.Tensor, factor: float =, *, bias: torch._tensor.Tensor | None =) -> torch._tensor.Tensor'
    assert again["calls.py"] - got["calls.py"] == {(last, f'note: Revealed type is "{signature}"')}, log
    assert {k: v for k, v in again.items() if k != "calls.py"} == {k: v for k, v in got.items() if k != "calls.py"}, log


@pytest.mark.slow
def test_mypy_without_plugin_sees_any(tmp_path: Path) -> None:
    cases = copy_cases(tmp_path)
    got, log = run_mypy(cases, mypy_config(tmp_path, plugin=False), tmp_path / "cache")
    notes = {line for line, text in got["calls.py"]}
    assert got["calls.py"] == {(line, 'note: Revealed type is "Any"') for line in notes}, log
    assert notes == {line for line, _ in expected("M")["calls.py"]}
    assert got["errors.py"] == set() and got["keywords.py"] == set(), log


@pytest.mark.slow
def test_pyright_diagnostics(tmp_path: Path) -> None:
    cases = copy_cases(tmp_path)
    (cases / "pyrightconfig.json").write_text(json.dumps({"extraPaths": [str(ROOT), str(cases)], "typeCheckingMode": "standard"}))
    out = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, *CASE_FILES],
        cwd=cases,
        capture_output=True,
        text=True,
    )
    report = json.loads(out.stdout)
    got: Diagnostics = {name: set() for name in CASE_FILES}
    for d in report["generalDiagnostics"]:
        text = f"{d['severity']}: {d['message'].splitlines()[0]}" + (f"  [{d['rule']}]" if "rule" in d else "")
        got[Path(d["file"]).name].add((d["range"]["start"]["line"] + 1, text))
    want = {name: {d for d in found if d[1] != "none"} for name, found in expected("P").items()}
    assert got == want, json.dumps(report["generalDiagnostics"], indent=1)


@pytest.mark.slow
def test_correct_calls_run() -> None:
    """The well-typed calls are also right at runtime."""
    out = subprocess.run([sys.executable, "calls.py"], cwd=CASES, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Runtime type is 'Tensor'" in out.stderr and "Runtime type is 'tuple'" in out.stderr


@pytest.mark.parametrize("name", CASE_FILES)
def test_every_case_line_has_an_expectation_for_both_tools(name: str) -> None:
    """A case written for one tool only would silently check nothing for the other."""
    m, p = expected("M")[name], expected("P")[name]
    assert m and {line for line, _ in m} == {line for line, _ in p}


def test_runtime_signature_and_help(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        """Scale a tensor."""

        @staticmethod
        def cpu(x: Tensor, factor: float = 2.0, *, bias: Optional[Tensor] = None) -> Tensor:
            return x * factor

    assert inspect.signature(Scale) == inspect.Signature(
        [
            inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Tensor),
            inspect.Parameter("factor", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=2.0, annotation=float),
            inspect.Parameter("bias", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Optional[Tensor]),
        ],
        return_annotation=Tensor,
    )
    text = pydoc.render_doc(Scale, renderer=pydoc.plaintext)
    assert "Scale(x: torch.Tensor, factor: float = 2.0, *, bias: Optional[torch.Tensor] = None) -> torch.Tensor" in text
    assert f"Operator ``{ns}::scale``: ``(Tensor x, float factor=2.0, *, Tensor? bias=None) -> Tensor``" in text
    assert "Scale a tensor." in text
    assert torch.equal(Scale(torch.ones(1)), torch.full((1,), 2.0))


def test_type_checkers_know_the_hooks_the_registry_has() -> None:
    """``HOOK_KINDS`` (what opclass.mypy reads, torch-free) is what the registry says of each
    built-in hook, and pyright's ``Kernel`` union has one protocol per kernel hook, in order."""
    import typing

    import opclass
    from opclass import _typing
    from opclass.core.names import HOOK_KINDS

    def kind(hook: opclass.Hook) -> str:
        return "members" if hook.members else "backend" if hook.backend else "kernel" if hook.kernel else "static" if hook.staticmethod else "value"

    assert {name: kind(hook) for name, hook in opclass.hooks().items()} == HOOK_KINDS
    kernels = [name for name, k in HOOK_KINDS.items() if k in ("backend", "kernel")]
    protocols = [typing.get_origin(typing.get_args(member)[0]) for member in typing.get_args(_typing.Kernel)]
    methods = [next(n for n in vars(p) if not n.startswith("_") or n == "_abstract_op_base_has_no_kernel") for p in protocols]
    assert methods == [*kernels, "_abstract_op_base_has_no_kernel"]
