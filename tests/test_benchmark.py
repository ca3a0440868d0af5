"""``python -m benchmarks`` (``benchmarks/benchmark.py``): the scaling, repeated-run, per-guard and targets-met code paths.

Structure only (rows, columns, JSON keys), with tiny sizes and run times: no timing assertions.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is a top-level folder beside opclass/, not part of the package
    sys.path.insert(0, str(ROOT))

from benchmarks import benchmark, model_bench  # noqa: E402
from benchmarks.compile_bench import compile_time  # noqa: E402

ARGS, LISTS = (1, 2, 20), (1, 4)


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    """One real measurement with --scale (no definition or compile part), tiny sizes."""
    return benchmark.measure(0.001, (1, 14), scale=True, scale_args=ARGS, scale_lists=LISTS, define_ops=0, compile_calls=0)


def _as_guard(result: dict[str, Any], guard: str, factor: float = 1.0) -> dict[str, Any]:
    """``result`` relabelled as ``guard``'s, every figure times ``factor``, derived parts recomputed."""
    copy = json.loads(json.dumps(result))
    copy["guard"], copy["guard_info"] = guard, f"{guard}: test"
    for row in copy["rows"] + copy["scale"]["rows"]:
        row["us"] *= factor
    copy["scale"]["definition"] = {k: {"total_s": 0.1 * factor, "ms_per_op": 0.5 * factor, "first_call_ms": 1.0} for k in ("opclass", "custom_op", "define/impl")}
    copy["scale"]["compile"] = {"n_calls": 400, "source": "test", "seconds": {"class": 1.0 * factor, "op": 1.0, "custom_op": 2.0}}
    return benchmark.finish(copy)


def test_scale_rows_cover_every_size_and_impl(measured: dict[str, Any]) -> None:
    rows = measured["scale"]["rows"]
    keys = [(r["kind"], r["n"], r["impl"]) for r in rows]
    expected = [("args", n, i) for n in ARGS for i in benchmark._SCALE_IMPLS] + [("list", n, i) for n in LISTS for i in benchmark._SCALE_IMPLS]
    assert keys == expected
    assert all(r["us"] > 0 for r in rows)
    fits = measured["scale"]["fits"]
    assert set(fits) == {"args", "list"}
    for kind in fits:
        assert set(fits[kind]) == {"opclass", "MyOp.op"}
        assert set(fits[kind]["opclass"]) == {"fixed_us", "per_tensor_us"}


def test_fit_is_least_squares() -> None:
    rows = [{"kind": "list", "n": n, "impl": "opclass", "us": us} for n, us in ((1, 2.0), (2, 2.5), (3, 2.6))]
    fit = benchmark.scale_fits(rows)["list"]["opclass"]
    assert fit is not None
    assert fit["per_tensor_us"] == pytest.approx(0.3)
    assert fit["fixed_us"] == pytest.approx(7.1 / 3 - 0.3 * 2)  # mean us - slope * mean n
    assert benchmark.scale_fits(rows[:1])["list"]["opclass"] is None


def test_done_checks_differ_per_guard(measured: dict[str, Any]) -> None:
    python = {c["check"]: c for c in _as_guard(measured, "python")["done"]}
    native = {c["check"]: c for c in _as_guard(measured, "native")["done"]}
    assert python["14 args: no-grad / direct"]["limit"] == 2.0
    assert native["14 args: no-grad / direct"]["limit"] == 1.25
    assert "scale: class per-Tensor us (args fit)" in python and "scale: class per-Tensor us (args fit)" not in native
    # No 64-argument or 512-long rows were measured: those native checks are left out, not failed.
    assert "scale: 64 args / direct" not in native and "scale: list of 512 / direct" not in native
    assert python["compile: class / op"]["value"] == pytest.approx(1.0)
    assert python["definition: ms per op"]["met"] is True
    assert python["scale: class / MyOp.op, every size"]["note"].startswith("worst: ")


def test_out_rows_and_their_target(measured: dict[str, Any]) -> None:
    """The out= scenario: four ways to call one out-style kernel, per argument count; the class
    call's ratio to the direct call is a target (native guard: 1.2) and a done check."""
    rows = measured["rows"]
    for n in (1, 14):
        out_rows = [r for r in rows if r["args"] == n and r["scenario"] == "out="]
        assert [r["impl"] for r in out_rows] == ["direct", "opclass", "MyOp.out", "torch.ops .out"]
        assert all(r["us"] > 0 for r in out_rows)
    target = next(t for t in measured["targets"] if t["target"] == "1 arg: out= / direct out kernel")
    expected = benchmark._lookup(rows, 1, "out=", "opclass") / benchmark._lookup(rows, 1, "out=", "direct")
    assert target["ratio"] == pytest.approx(expected) and target["native_limit"] == 1.2
    python = {c["check"]: c for c in _as_guard(measured, "python")["done"]}
    native = {c["check"]: c for c in _as_guard(measured, "native")["done"]}
    assert native["1 arg: out= / direct out kernel"]["limit"] == 1.2
    assert python["1 arg: out= / direct out kernel"]["limit"] == benchmark.OUT_LIMIT


def test_out_rows_call_the_out_kernel_into_the_buffer() -> None:
    """What the out= rows time: each call writes the first argument into the caller's buffer and
    returns it (the overload is .out, with the out-style kernel), as the direct call writes it."""
    import torch

    ops = benchmark._define_ops(1, "opclass_bench_test_out")
    try:
        x = torch.randn(4)
        assert ops["opclass_out_ops"]._schema.overload_name == "out"
        for fn in (ops["opclass_out"], ops["opclass_out_class"], ops["opclass_out_ops"]):
            buf = torch.zeros(4)
            assert fn(x, out=buf) is buf
            assert torch.equal(buf, x)
        buf = torch.zeros(4)
        assert ops["out_kernel"](x, out=buf) is None and torch.equal(buf, x)
    finally:
        benchmark._drop(ops)


def test_median_of_runs_recomputes_derived(measured: dict[str, Any]) -> None:
    runs = [_as_guard(measured, "python", f) for f in (1.0, 3.0, 2.0)]
    merged = benchmark.median_result(runs)
    assert merged["runs"] == 3
    assert [r["us"] for r in merged["rows"]] == pytest.approx([r["us"] for r in runs[2]["rows"]])
    assert [r["us"] for r in merged["scale"]["rows"]] == pytest.approx([r["us"] for r in runs[2]["scale"]["rows"]])
    assert merged["scale"]["definition"]["opclass"]["ms_per_op"] == pytest.approx(1.0)
    assert merged["scale"]["compile"]["seconds"]["class"] == pytest.approx(2.0)
    assert merged["done"] == runs[2]["done"]


def test_collect_both_and_a_missing_native_guard(measured: dict[str, Any]) -> None:
    calls: list[str] = []

    def child(guard: str, forwarded: list[str]) -> dict[str, Any]:
        calls.append(guard)
        return _as_guard(measured, guard, 1.0 + len(calls))

    results, skipped = benchmark.collect("both", 2, [], child=child)
    assert list(results) == ["native", "python"] and skipped == {}
    assert calls == ["native", "native", "python", "python"]

    def no_native(guard: str, forwarded: list[str]) -> dict[str, Any]:
        if guard == "native":
            raise RuntimeError("no compiler")
        return _as_guard(measured, guard)

    for mode in ("both", "native"):
        results, skipped = benchmark.collect(mode, 1, [], child=no_native)
        assert list(results) == ["python"]
        assert skipped == {"native": "no compiler"}


def test_tables_side_by_side(measured: dict[str, Any]) -> None:
    out = io.StringIO()
    benchmark.print_tables({"native": _as_guard(measured, "native"), "python": _as_guard(measured, "python")}, 0.001, out)
    text = out.getvalue()
    assert "native us" in text and "python us" in text
    # A reader is told what each row and column compares.
    assert "custom_op = torch.library.custom_op" in text and "x direct: this row's time / the direct row's time" in text
    assert "issue" not in text.lower()
    assert "native ratio" in text and "python ratio" in text
    assert "--- native guard ---" in text and "--- python guard ---" in text
    for label in ("20 args", "list 4"):
        assert any(line.startswith(label) for line in text.splitlines())
    for guard in ("native", "python"):
        assert f"{guard} guard, args fit: class call" in text and f"{guard} guard, list fit: class call" in text
    assert "native total s" in text and "python s" in text
    done = text.split("targets met")[1].splitlines()
    per_tensor = next(line for line in done if line.startswith("scale: class per-Tensor us (args fit)"))
    assert per_tensor.split()[6] == "-"  # a Python-guard check: no native figure
    assert "<= 0.25" in per_tensor


@pytest.mark.slow
def test_define_many_and_compile_time() -> None:
    for kind in ("opclass", "custom_op", "define/impl"):
        cost = benchmark._define_many(kind, 3)
        assert set(cost) == {"total_s", "ms_per_op", "first_call_ms", "import_ms"}
        assert cost["import_ms"] >= 0 and cost["ms_per_op"] > 0
    assert compile_time(3, "class") > 0


@pytest.mark.slow
def test_json_cli_one_guard_in_a_subprocess() -> None:
    command = [sys.executable, "-m", "benchmarks", "--json", "--guard", "python", "--args", "1", "--min-run-time", "0.001"]
    command += ["--scale", "--scale-args", "1,2", "--scale-lists", "1", "--define-ops", "0", "--compile-calls", "0"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout)
    assert result["guard"] == "python"
    assert {"torch", "device", "guard_info", "runs", "rows", "targets", "scale", "done"} <= set(result)
    assert {(r["kind"], r["n"]) for r in result["scale"]["rows"]} == {("args", 1), ("args", 2), ("list", 1)}
    assert "definition" not in result["scale"] and "compile" not in result["scale"]


@pytest.mark.slow
def test_model_steps_in_a_subprocess() -> None:
    """``--model`` alone (``--args`` with no count: no per-call table): every version's steps, the
    checks on them, and their table; the child asserts each version's loss equals plain's first."""
    command = [sys.executable, "-m", "benchmarks", "--json", "--guard", "python", "--args", "--model", "--model-backend", "aot_eager"]
    proc = subprocess.run(command + ["--min-run-time", "0.01"], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout)
    assert result["rows"] == [] and result["model"]["batch"] == 1 and result["model"]["backend"] == "aot_eager"
    keys = [(r["step"], r["mode"], r["impl"]) for r in result["model"]["rows"]]
    assert keys == [
        *((step, "eager", impl) for step in ("infer", "train") for impl in model_bench.IMPLS),
        *((step, "compiled", impl) for step in ("infer", "train") for impl in model_bench.COMPILED_IMPLS),
    ]
    assert all(r["us"] > 0 for r in result["model"]["rows"])
    checks = {c["check"]: c for c in result["done"]}
    assert checks["model: eager infer, opclass / plain"]["limit"] == 1.15  # the Python guard's limit
    assert {c for c in checks if c.startswith("model: ")} == {
        "model: eager infer, opclass / plain",
        "model: eager train, opclass / Function",
        "model: eager train, eager_autograd / plain",
        "model: compiled infer, traceable / plain",
        "model: compiled train, traceable / plain",
    }
    merged = benchmark.median_result([_scaled(result, f) for f in (1.0, 3.0, 2.0)])
    assert [r["us"] for r in merged["model"]["rows"]] == pytest.approx([2.0 * r["us"] for r in result["model"]["rows"]])
    out = io.StringIO()
    benchmark.print_tables({"python": merged}, 0.01, out)
    text = out.getvalue()
    assert "model steps: examples/decoder_block.py, batch 1, sequence 8" in text and "scenario" not in text
    train = next(line for line in text.splitlines() if line.startswith("train  eager     plain"))
    assert train.split()[-1] == "1.000x"


def _scaled(result: dict[str, Any], factor: float) -> dict[str, Any]:
    copy = json.loads(json.dumps(result))
    for row in copy["model"]["rows"]:
        row["us"] *= factor
    return copy
