"""Tuning tables: ``opclass.tune_providers`` measures the provider each bucket of calls (dtype, size
class) runs fastest, ``Tuning.save`` keeps it, ``opclass.load_tuning`` and ``OPCLASS_TUNING`` read
it back (in a fresh process too) and the choice uses it on every route; a table measured on another
device, torch or kernel source is refused with the reason; the reference mode ignores it and an
order restricts it."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import opclass
from opclass._harness import call_paths
from opclass.callpath.source import c_entry

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = torch.ones(16), torch.ones(4096)
_MODULES = itertools.count()

# Each provider is slow (2 ms) off its own sizes, so the measured winners are certain: ``small``
# (adds 1) on small Tensors, ``large`` (adds LARGE_ADDS) on large ones, never ``default`` (adds 0);
# their tolerances let them differ from the reference by that much (a wrong provider is left out).
OP_SOURCE = '''
import time
import torch
import opclass
from torch import Tensor


class Pick(opclass.CustomOp, name="{ns}::pick"):
    @staticmethod
    def default(x: Tensor) -> Tensor:
        time.sleep(0.002)
        return x.clone()

    @opclass.provider("cpu", atol=10.0, rtol=0.0)
    @staticmethod
    def small(x: Tensor) -> Tensor:
        if x.numel() > 1000:
            time.sleep(0.002)
        return x + 1

    @opclass.provider("cpu", atol=10.0, rtol=0.0)
    @staticmethod
    def large(x: Tensor) -> Tensor:
        if x.numel() <= 1000:
            time.sleep(0.002)
        return x + {large_adds}
'''


def define(tmp_path: Path, ns: str, large_adds: int = 2) -> Any:
    """The op of :data:`OP_SOURCE`, defined from a file (as a fresh process defines it)."""
    path = tmp_path / f"pick_{large_adds}.py"
    path.write_text(OP_SOURCE.format(ns=ns, large_adds=large_adds))
    spec = importlib.util.spec_from_file_location(f"tuned_pick_{next(_MODULES)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Pick


def tune(op: Any, **extra: Any) -> opclass.Tuning:
    return opclass.tune_providers(op, [(SMALL,), (LARGE,)], min_run_time=0.01, show=False, **extra)


def added(op: Any) -> set[tuple[int, float]]:
    """What each route adds to a small and to a large Tensor: one pair per size where they agree."""
    return {(x.numel(), float((fn(x) - x)[0])) for fn in call_paths(op).values() for x in (SMALL, LARGE)}


@pytest.fixture
def tuned(tmp_path: Path, ns: str) -> tuple[Any, opclass.Tuning, Path]:
    """The op, its table (measured here) and the file it is saved in, not loaded."""
    op = define(tmp_path, ns)
    table = tune(op)
    path = tmp_path / "tuning.json"
    table.save(path)
    return op, table, path


def test_tune_providers_measures_a_table_per_bucket(tuned: tuple[Any, opclass.Tuning, Path], capsys: pytest.CaptureFixture[str]) -> None:
    op, table, path = tuned
    assert table.op == op.qualname and table.device_type == "cpu" and table.torch == torch.__version__
    assert table.sizes == (256,)  # the geometric midpoint of 16 and 4096
    assert table.choices == {(torch.float32, 0): "small", (torch.float32, 1): "large"}
    assert set(table.hashes) == set(table.spread) == {"small", "large", "default"}
    assert table.order[-1] == "default"
    opclass.set_provider_order(op, table.order)  # the order, as tune_providers returned before
    assert opclass.provider_order(op) == table.order
    bounded = opclass.tune_providers(op, [(SMALL,), (LARGE,)], sizes=[1 << 20, 4096], min_run_time=0.01)
    assert bounded.sizes == (4096, 1 << 20) and set(bounded.choices) == {(torch.float32, 0), (torch.float32, 1)}
    shown = capsys.readouterr().out
    assert "bucket (float32, 0):" in shown and "bucket (float32, 1):" in shown and "<- the table's choice" in shown
    on_disk = json.loads(path.read_text())["tables"][op.qualname]
    assert sorted(map(tuple, on_disk["choices"])) == [("float32", 0, "small"), ("float32", 1, "large")]


def test_a_loaded_table_chooses_per_bucket_on_every_route(tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, _, path = tuned
    assert added(op) == {(16, 1.0), (4096, 1.0)}  # the declaration's order: small first
    assert [t.op for t in opclass.load_tuning(path)] == [op.qualname]
    assert opclass.which_provider(op, SMALL) == "small" and opclass.which_provider(op, LARGE) == "large"
    assert added(op) == {(16, 1.0), (4096, 2.0)}
    entry = c_entry(op.record)
    if entry is not None:  # the native guard tests the bucket itself: (place, {dtype: [low, high)})
        test = entry[2][0]
        assert type(test) is tuple and test[0] == (0,) and set(test[1]) <= {torch.float32}
    assert float(op(LARGE.double())[0]) == 2.0  # bucket (float64, 1) is not in the table: the order's choice (small)
    with opclass.use_providers({op: ["small", "large", "default"]}):  # a block's choice, cached in the block
        assert added(op) == {(16, 1.0), (4096, 2.0)}


def test_explain_providers_names_the_table(tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, _, path = tuned
    opclass.load_tuning(path)
    assert opclass.explain_providers(op, LARGE).splitlines()[1:] == [
        "  small (cpu): the tuning table chooses another for this bucket",
        "  large (cpu): runs (tuning table: bucket (float32, 1) → large)",
        "  default (any device): an earlier provider runs",
    ]
    assert "  small (cpu): runs (bucket (float64, 1) is not in the tuning table)" in opclass.explain_providers(op, LARGE.double())
    assert opclass.explain_providers(op).splitlines()[-1] == "tuning table: (float32, 0) → small, (float32, 1) → large"


def test_the_reference_mode_ignores_the_table_and_an_order_restricts_it(tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, _, path = tuned
    opclass.load_tuning(path)
    with opclass.use_providers(reference=True):
        assert added(op) == {(16, 0.0), (4096, 0.0)}
    with opclass.use_providers({op: ["small", "default"]}):  # the table's large is not allowed
        assert added(op) == {(16, 1.0), (4096, 1.0)}
    opclass.set_provider_order(op, ["large", "small"])  # the table reorders what the order allows
    assert added(op) == {(16, 1.0), (4096, 2.0)}
    opclass.set_provider_order(op, ["large"])
    assert added(op) == {(16, 2.0), (4096, 2.0)}


def test_a_changed_provider_refuses_the_table(tmp_path: Path, ns: str, tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, _, path = tuned
    opclass.remove(op)
    changed = define(tmp_path, ns, large_adds=3)  # the same class, large's body changed
    with pytest.raises(ValueError, match=rf"the tuning table of {ns}::pick in .* does not fit the op defined here: provider 'large' changed since tuning \(source hash [0-9a-f]{{12}}, now [0-9a-f]{{12}}\)"):
        opclass.load_tuning(path)
    assert opclass.which_provider(changed, LARGE) == "small"  # nothing loaded
    opclass.remove(changed)
    opclass.load_tuning(path)  # no op of that name: loaded, checked when one is defined
    with pytest.warns(UserWarning, match=rf"opclass.load_tuning: the tuning table of {ns}::pick does not fit the op defined here, so it is not used: provider 'large' changed since tuning"):
        again = define(tmp_path, ns, large_adds=3)
    assert added(again) == {(16, 1.0), (4096, 1.0)}


def test_a_table_from_another_device_or_torch_or_naming_a_missing_provider_is_refused(tmp_path: Path, tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, table, _ = tuned
    here = table.device  # measured here
    cases = {
        "device": (dataclasses.replace(table, device="NVIDIA H100 80GB HBM3"), f"tuned on NVIDIA H100 80GB HBM3, this is {here}"),
        "torch": (dataclasses.replace(table, torch="2.0.0"), f"tuned with torch 2.0.0, this is torch {torch.__version__}"),
        "provider": (dataclasses.replace(table, choices={(torch.float32, 0): "triton"}), f"it names provider 'triton', which {op.qualname} does not have"),
    }
    for name, (wrong, reason) in cases.items():
        path = tmp_path / f"{name}.json"
        wrong.save(path)
        with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
            opclass.load_tuning(path)
    assert opclass.which_provider(op, LARGE) == "small"


def test_one_file_holds_several_ops_tables(tmp_path: Path, ns: str, tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    op, table, path = tuned

    class Other(opclass.CustomOp, name=f"{ns}::other"):
        @staticmethod
        def default(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @opclass.provider("cpu")
        @staticmethod
        def add(x: torch.Tensor) -> torch.Tensor:
            return x + x

    tune(Other).save(path)
    table.save(path)  # replaces op's, keeps Other's
    assert sorted(t.op for t in opclass.load_tuning(path)) == sorted([op.qualname, Other.qualname])
    assert opclass.which_provider(op, LARGE) == "large"
    (tmp_path / "bad.json").write_text('{"tables": {}}')
    with pytest.raises(ValueError, match="is no opclass tuning file"):
        opclass.load_tuning(tmp_path / "bad.json")


@pytest.mark.slow
def test_a_saved_table_chooses_in_a_fresh_process(tmp_path: Path, ns: str, tuned: tuple[Any, opclass.Tuning, Path]) -> None:
    _, table, path = tuned
    elsewhere = tmp_path / "elsewhere.json"
    dataclasses.replace(table, device="NVIDIA H100 80GB HBM3").save(elsewhere)
    script = tmp_path / "fresh.py"
    script.write_text(
        "import importlib.util, os, sys, torch, opclass\n"
        f"spec = importlib.util.spec_from_file_location('pick', {str(tmp_path / 'pick_2.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"if sys.argv[1:] == ['load']:\n    opclass.load_tuning({str(path)!r})\n"
        "small, large = torch.ones(16), torch.ones(4096)\n"
        "print(opclass.which_provider(m.Pick, small), opclass.which_provider(m.Pick, large), float(m.Pick(small)[0]), float(m.Pick.op(large)[0]))\n"
        "os.environ['OPCLASS_TUNING'] = 'elsewhere.json'\n"
        "try:\n    opclass.explain_providers(m.Pick)\nexcept RuntimeError as e:\n    print(str(e).split(';')[0])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*argv: str, **extra: str) -> list[str]:
        done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, env={**env, **extra}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [*done.stdout.strip().splitlines(), done.stderr]

    changed = f"OPCLASS_TUNING changed after opclass was imported (from {str(path)!r} to 'elsewhere.json')"
    assert run(OPCLASS_TUNING=str(path)) == ["small large 2.0 3.0", changed, ""]
    assert run("load")[0] == "small large 2.0 3.0"
    assert run()[0] == "small small 2.0 2.0"  # no table
    # Measured on another device: the class statement warns, and the op runs without the table.
    out, _, warned = run(OPCLASS_TUNING=str(elsewhere))
    assert out == "small small 2.0 2.0"
    assert f"UserWarning: OPCLASS_TUNING: the tuning table of {ns}::pick does not fit the op defined here, so it is not used: tuned on NVIDIA H100 80GB HBM3, this is {table.device}" in warned


def test_a_calls_bucket_is_its_first_floating_dtype_and_largest_size(ns: str) -> None:
    from opclass.install.tuning import bucket_function

    class Gather(opclass.CustomOp, name=f"{ns}::gather"):
        @staticmethod
        def default(index: torch.Tensor, x: torch.Tensor, extra: list[torch.Tensor]) -> torch.Tensor:
            return x[index]

    class Neg(opclass.CustomOp, name=f"{ns}::neg"):
        @staticmethod
        def default(x: torch.Tensor) -> torch.Tensor:
            return -x

    bucket = bucket_function([100, 10], Gather.record.arguments)
    index = torch.zeros(3, dtype=torch.long)
    assert bucket(index, torch.ones(5, dtype=torch.float16), []) == (torch.float16, 0)
    assert bucket(index, torch.ones(5, dtype=torch.float16), [torch.ones(50)]) == (torch.float16, 1)  # the largest: 50
    assert bucket(index, index, [torch.ones(500, dtype=torch.float64)]) == (torch.float64, 2)  # the first floating one
    assert bucket(index, index, []) == (torch.long, 0)  # none floating: the first
    # What the C entry tests, spans of sizes per dtype, answers as the buckets' set does (where it applies).
    from opclass.install.tuning import native_test

    plain = bucket_function((16, 256), Neg.record.arguments)
    buckets = [(d, c) for d in (torch.float32, torch.float16) for c in range(3)]
    tested = 0
    for within in map(frozenset, itertools.chain.from_iterable(itertools.combinations(buckets, r) for r in (1, 2, 3))):
        test = native_test((16, 256), Neg.record.arguments, within)
        if test is None:
            continue  # a dtype's classes not contiguous: the Python predicate
        tested += 1
        for x in (torch.empty(n, dtype=d) for d in (torch.float32, torch.float16, torch.float64) for n in (0, 15, 16, 255, 256, 300)):
            low, high = test[1].get(x.dtype, (1, 0))
            assert (low <= x.numel() < high) == (plain(x) in within), (sorted(within, key=str), x.dtype, x.numel())
    assert tested > 20


def test_a_provider_that_disagrees_with_the_reference_is_left_out(ns: str) -> None:
    class Halve(opclass.CustomOp, name=f"{ns}::halve"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x / 2

        @opclass.provider("cpu", atol={torch.float16: 1e-2})
        @staticmethod
        def wrong(x: Tensor) -> Tensor:
            return x / 2 + 1e-3  # within float16's tolerance, not float32's (the defaults)

        @opclass.provider("cpu")
        @staticmethod
        def mul(x: Tensor) -> Tensor:
            return x * 0.5

    samples = [(torch.ones(64),), (torch.ones(64, dtype=torch.float16),)]
    with pytest.warns(UserWarning, match=r"tune_providers: left out of the table: .*\(Halve.wrong\) disagrees with .*\(Halve.default\) \(tune_providers compares them on each sample\)"):
        tuned = opclass.tune_providers(Halve, samples, min_run_time=0.01, show=False)
    assert "wrong" not in tuned.choices.values() and "wrong" not in tuned.order


def test_a_bucket_is_read_from_every_tensor_argument_on_every_route(ns: str, tmp_path: Path) -> None:
    class Two(opclass.CustomOp, name=f"{ns}::two"):
        @staticmethod
        def default(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @opclass.provider("cpu", atol=10.0, rtol=0.0)
        @staticmethod
        def one(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x + 1

        @opclass.provider("cpu", atol=10.0, rtol=0.0)
        @staticmethod
        def two(i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x + 2

    tuned = opclass.tune_providers(Two, [(torch.zeros(4, dtype=torch.int64), torch.zeros(8))], sizes=[100], min_run_time=0.01, show=False)
    dataclasses.replace(tuned, choices={(torch.float32, 1): "two", (torch.float64, 0): "two"}).save(tmp_path / "two.json")
    opclass.load_tuning(tmp_path / "two.json")
    entry = c_entry(Two.record)
    if entry is not None:  # the native guard reads both Tensors
        assert entry[2][0][0] == (0, 1)
    cases = [
        ((torch.zeros(4, dtype=torch.int64), torch.zeros(8)), 1.0),  # (float32, 0): not in the table, the order's first
        ((torch.zeros(1000, dtype=torch.int64), torch.zeros(8)), 2.0),  # the largest Tensor is the int one: (float32, 1)
        ((torch.zeros(4, dtype=torch.int64), torch.zeros(8, dtype=torch.float64)), 2.0),  # the first floating dtype: (float64, 0)
    ]
    for args, adds in cases:
        assert {float(fn(*args)[0]) for fn in call_paths(Two).values()} == {adds}
