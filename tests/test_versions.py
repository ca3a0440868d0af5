"""Supported torch versions: the declared range, tools/test-torch-versions, and what 2.11 and 2.12 lack.

``opclass._compat`` decides by feature what the installed torch offers; these tests check that
its answers hold for the torch installed (the suite runs on each supported release through
tools/test-torch-versions), and that the script's releases, pyproject.toml's range and the
documentation agree.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import Tensor

from opclass import CustomOp, OpDefinitionError

from opclass.core import compat as _compat

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "test-torch-versions"


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("test_torch_versions_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_script_releases_match_the_declared_range() -> None:
    """pyproject.toml declares exactly the minor releases the script runs, and torch is one of them."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'"torch>=(\d+\.\d+),<(\d+\.\d+)"', text)
    assert m, "pyproject.toml must give torch a range: torch>=X.Y,<X.Z"
    low, high = _minor(m.group(1)), _minor(m.group(2))
    releases = _script().RELEASES
    assert [_minor(k) for k in releases] == [(2, n) for n in range(low[1], high[1])]
    assert all(v.startswith(k + ".") for k, v in releases.items())
    assert low <= _minor(torch.__version__) < high


def test_supported_versions_are_in_getting_started() -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    for minor in _script().RELEASES:
        assert f"| {minor} " in text, f"docs/getting-started.md has no row for torch {minor}"
    assert "tools/test-torch-versions" in text


def test_script_pins_exact_versions_and_parses_pytest_args() -> None:
    script = _script()
    assert script.release("2.11") == "2.11.0" and script.release("2.14.0") == "2.14.0"
    with pytest.raises(ValueError, match="give the exact version"):
        script.release("2.99")
    with pytest.raises(ValueError, match="not a torch version"):
        script.release("latest")
    ns, pytest_args = script.parse_args(["--wheels", "/w", "2.11", "2.15", "--", "-x", "tests/test_schema.py"])
    assert ns.releases == ["2.11.0", "2.15.0"] and ns.wheels == [Path("/w")]
    assert pytest_args == ["-x", "tests/test_schema.py"]
    ns, pytest_args = script.parse_args([])
    assert ns.releases == list(script.RELEASES.values()) and pytest_args == []


@pytest.mark.slow
def test_script_help_and_bad_version() -> None:
    helped = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--wheels" in helped.stdout and "2.11->2.11.0" in helped.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "2.99"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "give the exact version, e.g. 2.99.0" in bad.stderr


def test_mutation_tags_follow_torch() -> None:
    """Where torch has the tags, opclass applies their rules; where it has none (2.11, 2.12), an op that
    mutates and returns its input is an ordinary mutating op, held to the aliasing rule."""
    assert set(_compat.MUTATION_TAGS) == {t for t in (getattr(torch.Tag, "inplace", None), getattr(torch.Tag, "out", None)) if t is not None}
    for tag in _compat.MUTATION_TAGS:
        assert _compat.tagged_inplace((tag,)) == (tag.name == "inplace")
        assert _compat.tagged_out((tag,)) == (tag.name == "out")
    assert not _compat.tagged_inplace((torch.Tag.pt2_compliant_tag,)) and not _compat.tagged_out(())


def test_aliasing_rule_without_inplace_tag(ns: str) -> None:
    class AddOneAndReturn(CustomOp, name=f"{ns}::add_one_and_return", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            x.add_(1)
            return x

    with pytest.raises(RuntimeError, match="must not also be an input"):
        AddOneAndReturn(torch.zeros(1))
    with pytest.raises(RuntimeError, match="must not also be an input"):
        getattr(torch.ops, ns).add_one_and_return(torch.zeros(1))


@dataclasses.dataclass(frozen=True)
class _Config:
    k: int = 2


def test_config_object_where_torch_takes_no_plain_opaque_value(ns: str) -> None:
    """torch 2.11: a config class is a definition error naming the torch version and the way out;
    elsewhere it is an op argument (tests/test_config_objects.py has the rest)."""

    def define() -> type[CustomOp]:
        class Scale(CustomOp, name=f"{ns}::scale"):
            @staticmethod
            def default(x: Tensor, cfg: _Config) -> Tensor:
                return x * cfg.k

        return Scale

    if _compat.plain_opaque_values():
        assert torch.equal(define()(torch.ones(2), _Config()), torch.full((2,), 2.0))
        return
    with pytest.raises(OpDefinitionError) as info:
        define()
    assert info.value.problem == (
        f"parameter 'cfg': config class {_Config.__qualname__} cannot be an op argument on torch {torch.__version__}, whose opaque value types must derive from a private torch class"
    )
    assert info.value.fix == "use torch 2.12 or later for config objects, or pass the fields as separate arguments"
    assert not hasattr(getattr(torch.ops, ns), "scale")


# --------------------------------------------------------------------------- deprecations are errors


def test_a_deprecation_fails_the_test_that_causes_it() -> None:
    """conftest turns deprecation warnings into errors, and a notice torch logs (2.14 renamed its
    opaque types and logs the old names' use) into a failed test: a user sees none because of opclass."""
    import warnings

    from conftest import _LOGGED, _NEWEST

    for category in (DeprecationWarning, FutureWarning):
        with pytest.raises(category):  # raised from opclass's code: an error on every torch
            warnings.warn_explicit("old", category, "compat.py", 1, module="opclass.core.compat")
        if _NEWEST:
            with pytest.raises(category):  # from anywhere, on torch 2.14 and later
                warnings.warn("old", category)
    from torch._library import opaque_object

    if not hasattr(opaque_object, "register_custom_class"):
        pytest.skip(f"torch {torch.__version__} has no renamed opaque types, whose old names log a deprecation")

    @dataclasses.dataclass(frozen=True)
    class Old:
        k: int = 1

    Old.__fx_repr__ = lambda self: ("Old()", {"Old": Old})  # type: ignore[attr-defined]
    opaque_object.register_opaque_type(Old, typ="value")  # the old spelling, as opclass wrote it before
    try:
        assert any("register_opaque_type is deprecated" in m for m in _LOGGED.seen), _LOGGED.seen
    finally:
        del _LOGGED.seen[:]
        if hasattr(opaque_object, "unregister_custom_class"):
            opaque_object.unregister_custom_class(Old)
