"""Per-call overhead of opclass ops against the other ways to define an op, in one process.

Run ``python -m benchmarks`` from the repository root (``--json`` for machine-readable output,
``--min-run-time`` to trade time for stability). Every op clones its first argument, so the kernel
costs the same everywhere and the differences are call overhead.
Figures are medians of ``torch.utils.benchmark.Timer.blocked_autorange``; compare ratios taken in
one run, not absolute times across machines.

``--guard native|python|both`` measures each guard in a subprocess of its own (the guard is chosen
once, at import); ``--scale`` adds the scaling, definition-cost and compile-time tables; ``--runs N``
repeats everything in fresh subprocesses and reports the median of each figure. The run ends with
the checks each guard must meet ("targets met"), per guard.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils.benchmark as tbench
from torch import Tensor

import opclass

_NS = "opclass_bench"
# Namespaces get a fresh number per measurement: custom_op's cannot be removed, so a second
# measurement in one process (tests, notebooks) must not reuse their names.
_FRESH = itertools.count()

#: Scaling table sizes: Tensor-argument counts, and ``list[Tensor]`` lengths.
SCALE_ARGS = (1, 2, 4, 8, 14, 32, 64)
SCALE_LISTS = (1, 8, 64, 512)
_SCALE_IMPLS = ("direct", "opclass", "MyOp.op", "custom_op", "define/impl")


class _Subclass(torch.Tensor):
    """A Tensor subclass that changes nothing, so every guard-based fast path must step aside."""


def _params(n: int) -> list[str]:
    # Generated names: 64 positional Tensors need more than the alphabet.
    return [f"a{i}" for i in range(n)]


def _make_function(name: str, body: str, n: int, namespace: dict[str, Any], params: str | None = None, returns: str = "Tensor") -> Callable[..., Any]:
    # exec'd without ``from __future__ import annotations``: custom_op reads real annotation objects.
    signature = params if params is not None else ", ".join(f"{p}: Tensor" for p in _params(n))
    source = f"def {name}({signature}) -> {returns}:\n    {body}\n"
    exec(compile(source, f"<benchmarks.benchmark {name}>", "exec"), namespace)  # noqa: S102
    fn: Callable[..., Any] = namespace[name]
    return fn


def _save_nothing(ctx: Any, inputs: Any, output: Any) -> None:
    pass


def _define_ops(n: int, prefix: str) -> dict[str, Any]:
    """Every competitor for ``n`` Tensor arguments, in namespaces starting with ``prefix``."""
    ns: dict[str, Any] = {"Tensor": Tensor, "torch": torch}
    clone, mutate = "return a0.clone()", "a0.zero_()\n    return a0.clone()"
    direct = _make_function(f"direct_{n}", clone, n, ns)
    mutate_direct = _make_function(f"mutate_direct_{n}", mutate, n, ns)

    lib = torch.library.Library(f"{prefix}_def{n}", "FRAGMENT")
    lib.define(f"clone({', '.join(f'Tensor {p}' for p in _params(n))}) -> Tensor")
    lib.impl("clone", lambda a, *rest: a.clone(), "CPU")
    lib.impl("clone", lambda a, *rest: a.clone(), "CUDA")
    define_impl = getattr(torch.ops, f"{prefix}_def{n}").clone.default

    custom = torch.library.custom_op(f"{prefix}_co{n}::clone", mutates_args=())(_make_function(f"co_clone_{n}", clone, n, dict(ns)))
    custom.register_fake(lambda a, *rest: torch.empty_like(a))

    def clone_backward(ctx: Any, grad: Tensor) -> Any:
        return (grad,) + (None,) * (n - 1)

    custom.register_autograd(clone_backward, setup_context=_save_nothing)
    custom_mutate = torch.library.custom_op(f"{prefix}_com{n}::mutate", mutates_args=("a0",))(
        _make_function(f"co_mutate_{n}", mutate, n, dict(ns))
    )

    class CloneFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Tensor) -> Any:
            return direct(*args)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Any:
            return (grad,) + (None,) * (n - 1)

    c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, CloneFunction)

    kernel = _make_function(f"oc_clone_{n}", clone, n, dict(ns))
    mutate_kernel = _make_function(f"oc_mutate_{n}", mutate, n, dict(ns))

    class Clone(opclass.CustomOp, name=f"{prefix}_oc{n}::clone"):
        cpu = staticmethod(kernel)
        cuda = staticmethod(kernel)
        abstract = staticmethod(_make_function(f"oc_fake_{n}", "return torch.empty_like(a0)", n, dict(ns)))
        setup_context = staticmethod(_save_nothing)
        backward = staticmethod(clone_backward)

    class Mutate(opclass.CustomOp, name=f"{prefix}_oc{n}::mutate", mutates_args=("a0",)):
        cpu = staticmethod(mutate_kernel)
        cuda = staticmethod(mutate_kernel)

    def float32(a0: Tensor, *rest: Tensor) -> bool:
        return a0.dtype is torch.float32

    def providers(predicate: bool) -> Any:
        # Three providers of the same kernel, then a default; the first runs.
        first = opclass.provider(("cpu", "cuda"), supports=float32 if predicate else None)
        others = opclass.provider(("cpu", "cuda"))

        class Provided(opclass.CustomOp, name=f"{prefix}_oc{n}::{'predicate' if predicate else 'provided'}"):
            default = staticmethod(_make_function(f"oc_ref_{n}", clone, n, dict(ns)))
            p1 = first(staticmethod(kernel))
            p2 = others(staticmethod(_make_function(f"oc_p2_{n}", clone, n, dict(ns))))
            p3 = others(staticmethod(_make_function(f"oc_p3_{n}", clone, n, dict(ns))))

        return Provided

    # An out-style kernel (as vLLM's C++ kernels are): it copies its first argument into the
    # caller's buffer and returns nothing; ``out=True`` gives the op its ``.out`` overload, which
    # hands the kernel the caller's buffer as is.
    out_params = ", ".join([*(f"{p}: Tensor" for p in _params(n)), "*", "out: Tensor"])
    out_kernel = opclass.style("out")(_make_function(f"oc_copy_out_{n}", "out.copy_(a0)", n, dict(ns), out_params, returns="None"))
    out_ops: dict[str, Any] = {}
    if n < 64:  # the .out overload takes one argument more, and the dispatcher at most 64

        class CopyOut(opclass.CustomOp, name=f"{prefix}_oc{n}::copy", out=True):
            cpu = staticmethod(out_kernel)
            cuda = staticmethod(out_kernel)
            abstract = staticmethod(_make_function(f"oc_copy_fake_{n}", "return torch.empty_like(a0)", n, dict(ns)))

        out_ops = {"out_kernel": out_kernel, "opclass_out": CopyOut, "opclass_out_class": CopyOut.out, "opclass_out_ops": getattr(torch.ops, f"{prefix}_oc{n}").copy.out}

    class Tabled(opclass.CustomOp, name=f"{prefix}_oc{n}::tabled"):
        # Two providers of the same kernel: the declaration's order runs the first, a tuning table
        # (see _load_table) the second.
        default = staticmethod(_make_function(f"oc_tref_{n}", clone, n, dict(ns)))
        first = opclass.provider(("cpu", "cuda"))(staticmethod(_make_function(f"oc_t1_{n}", clone, n, dict(ns))))
        second = opclass.provider(("cpu", "cuda"))(staticmethod(kernel))

    return {
        "direct": direct,
        "mutate_direct": mutate_direct,
        "define_impl": define_impl,
        "custom_op": custom,
        "custom_op_ops": getattr(torch.ops, f"{prefix}_co{n}").clone.default,
        "custom_mutate": custom_mutate,
        "function_apply": c_apply,
        "opclass": Clone,
        "opclass_ops": Clone.op,
        "opclass_mutate": Mutate,
        "kernel": kernel,
        "providers": providers(False),
        "providers_predicate": providers(True),
        "tabled": Tabled,
        **out_ops,
        "predicate": float32,
        "lib": lib,
        "opclass_ns": f"{prefix}_oc{n}",
    }


def _define_list_ops(prefix: str) -> dict[str, Any]:
    """The ``(Tensor[] xs) -> Tensor`` competitors (cloning ``xs[0]``) for the scaling table."""
    ns: dict[str, Any] = {"Tensor": Tensor, "torch": torch}
    params, clone = "xs: list[Tensor]", "return xs[0].clone()"
    lib = torch.library.Library(f"{prefix}_def", "FRAGMENT")
    lib.define("clone(Tensor[] xs) -> Tensor")
    lib.impl("clone", lambda xs: xs[0].clone(), "CPU")
    lib.impl("clone", lambda xs: xs[0].clone(), "CUDA")
    custom = torch.library.custom_op(f"{prefix}_co::clone", mutates_args=())(_make_function("co_list", clone, 0, dict(ns), params))
    custom.register_fake(lambda xs: torch.empty_like(xs[0]))
    kernel = _make_function("oc_list", clone, 0, dict(ns), params)

    class CloneList(opclass.CustomOp, name=f"{prefix}_oc::clone"):
        cpu = staticmethod(kernel)
        cuda = staticmethod(kernel)
        abstract = staticmethod(_make_function("oc_list_fake", "return torch.empty_like(xs[0])", 0, dict(ns), params))

    return {
        "direct": _make_function("direct_list", clone, 0, dict(ns), params),
        "define_impl": getattr(torch.ops, f"{prefix}_def").clone.default,
        "custom_op": custom,
        "opclass": CloneList,
        "opclass_ops": CloneList.op,
        "lib": lib,
        "opclass_ns": f"{prefix}_oc",
    }


def _drop(ops: dict[str, Any]) -> None:
    opclass.remove_namespace(ops["opclass_ns"])
    ops["lib"]._destroy()


def _time(fn: Callable[..., Any], args: list[Any], min_run_time: float, inference: bool = False, kwargs: dict[str, Any] | None = None) -> float:
    """Median seconds per call (``kwargs``: keyword arguments too, for every row of a scenario alike)."""
    setup = "ctx = torch.inference_mode(); ctx.__enter__()" if inference else "pass"
    stmt = "fn(*args, **kwargs)" if kwargs else "fn(*args)"
    timer = tbench.Timer(stmt=stmt, setup=setup, globals={"fn": fn, "args": args, "kwargs": kwargs or {}, "torch": torch})
    return float(timer.blocked_autorange(min_run_time=min_run_time).median)


def run(min_run_time: float = 1.0, counts: tuple[int, ...] = (1, 14), device: str = "cpu") -> list[dict[str, Any]]:
    """Measure every scenario; returns rows ``{args, scenario, impl, us}``.

    Example:
        >>> rows = run(min_run_time=0.01, counts=(1,))  # doctest: +SKIP
    """
    rows: list[dict[str, Any]] = []
    prefix = f"{_NS}{next(_FRESH)}"
    for n in counts:
        ops = _define_ops(n, prefix)
        plain = [torch.randn(4, device=device) for _ in range(n)]
        grad = [torch.randn(4, device=device, requires_grad=True) for _ in range(n)]
        sub = [torch.randn(4, device=device).as_subclass(_Subclass) for _ in range(n)]
        _load_table(ops["tabled"], plain)
        scenarios: list[tuple[str, str, Callable[..., Any], list[Any], bool]] = [
            ("no-grad", "direct", ops["direct"], plain, False),
            ("no-grad", "define/impl", ops["define_impl"], plain, False),
            ("no-grad", "custom_op", ops["custom_op"], plain, False),
            ("no-grad", "opclass", ops["opclass"], plain, False),
            ("grad", "direct", ops["direct"], grad, False),
            ("grad", "Function C apply", ops["function_apply"], grad, False),
            ("grad", "custom_op", ops["custom_op"], grad, False),
            ("grad", "opclass", ops["opclass"], grad, False),
            ("inference_mode", "direct", ops["direct"], plain, True),
            ("inference_mode", "define/impl", ops["define_impl"], plain, True),
            ("inference_mode", "custom_op", ops["custom_op"], plain, True),
            ("inference_mode", "opclass", ops["opclass"], plain, True),
            ("mutable", "direct", ops["mutate_direct"], plain, False),
            ("mutable", "custom_op", ops["custom_mutate"], plain, False),
            ("mutable", "opclass", ops["opclass_mutate"], plain, False),
            ("guard fails (subclass)", "MyOp.op", ops["opclass_ops"], sub, False),
            ("guard fails (subclass)", "opclass", ops["opclass"], sub, False),
            ("torch.ops", "define/impl", ops["define_impl"], plain, False),
            ("torch.ops", "custom_op", ops["custom_op_ops"], plain, False),
            ("torch.ops", "opclass", ops["opclass_ops"], plain, False),
            ("providers", "direct", ops["kernel"], plain, False),
            ("providers", "opclass, one kernel", ops["opclass"], plain, False),
            ("providers", "opclass, 3 providers", ops["providers"], plain, False),
            ("providers", "predicate alone", ops["predicate"], plain, False),
            ("providers", "opclass, 3 providers, predicate", ops["providers_predicate"], plain, False),
            ("providers", "MyOp.op, 3 providers, predicate", ops["providers_predicate"].op, plain, False),
            ("providers", "opclass, 2 providers, tuning table", ops["tabled"], plain, False),
        ]
        for scenario, impl, fn, args, inference in scenarios:
            us = _time(fn, args, min_run_time, inference) * 1e6
            rows.append({"args": n, "scenario": scenario, "impl": impl, "us": us})
        for impl, us in _block_rows(ops["providers"], plain, min_run_time).items():
            rows.append({"args": n, "scenario": "providers", "impl": impl, "us": us})
        # out=: the caller's buffer (the right shape: no resize), no input needing grad.
        out = {"out": torch.empty(4, device=device)}
        for impl, key in (("direct", "out_kernel"), ("opclass", "opclass_out"), ("MyOp.out", "opclass_out_class"), ("torch.ops .out", "opclass_out_ops")):
            if key not in ops:
                continue
            us = _time(ops[key], plain, min_run_time, kwargs=out) * 1e6
            rows.append({"args": n, "scenario": "out=", "impl": impl, "us": us})
        _drop(ops)
    return rows


def _load_table(op: Any, args: list[Any]) -> None:
    """A tuning table for ``op`` that chooses its ``second`` provider for ``args``' bucket, saved
    and loaded as a deployment's would be (measured briefly: the choice is set, not measured)."""
    table = opclass.tune_providers(op, [tuple(args)], sizes=(4096, 1 << 20), min_run_time=0.001, show=False)  # the predicate reads the size
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tuning.json"
        dataclasses.replace(table, choices={bucket: "second" for bucket in table.choices}).save(path)
        opclass.load_tuning(path)
    assert opclass.which_provider(op, *args) == "second", opclass.explain_providers(op, *args)


def _block_rows(op: Any, args: list[Any], min_run_time: float) -> dict[str, float]:
    """A provider op's plain call while another thread holds a ``use_providers`` block that names
    it, and inside such a block (it picks ``p2``, the same kernel as the first provider), in us."""
    opened, done = threading.Event(), threading.Event()

    def hold() -> None:
        with opclass.use_providers({op: ["p2"]}):
            opened.set()
            done.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    opened.wait()
    try:
        other = _time(op, args, min_run_time)
    finally:
        done.set()
        holder.join()
    with opclass.use_providers({op: ["p2"]}):
        inside = _time(op, args, min_run_time)
    return {"opclass, 3 providers, a block in another thread": other * 1e6, "opclass, 3 providers, inside a block naming it": inside * 1e6}


def run_scale(
    min_run_time: float = 1.0, arg_counts: tuple[int, ...] = SCALE_ARGS, list_lengths: tuple[int, ...] = SCALE_LISTS, device: str = "cpu"
) -> list[dict[str, Any]]:
    """No-grad call cost against the number of Tensors: rows ``{kind: "args"|"list", n, impl, us}``.

    ``impl`` is one of direct, opclass (the class call), MyOp.op (the same op through ``torch.ops``),
    custom_op and define/impl.

    Example:
        >>> rows = run_scale(min_run_time=0.01, arg_counts=(1, 2), list_lengths=(1,))  # doctest: +SKIP
    """
    keys = ("direct", "opclass", "opclass_ops", "custom_op", "define_impl")
    rows: list[dict[str, Any]] = []
    prefix = f"{_NS}{next(_FRESH)}_scale"
    for n in arg_counts:
        ops = _define_ops(n, prefix)
        args = [torch.randn(4, device=device) for _ in range(n)]
        for impl, key in zip(_SCALE_IMPLS, keys):
            rows.append({"kind": "args", "n": n, "impl": impl, "us": _time(ops[key], args, min_run_time) * 1e6})
        _drop(ops)
    if list_lengths:
        ops = _define_list_ops(f"{prefix}_list")
        for n in list_lengths:
            xs = [torch.randn(4, device=device) for _ in range(n)]
            for impl, key in zip(_SCALE_IMPLS, keys):
                rows.append({"kind": "list", "n": n, "impl": impl, "us": _time(ops[key], [xs], min_run_time) * 1e6})
        _drop(ops)
    return rows


def _fit(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Least-squares ``us = fixed + per_tensor * n``; ``None`` without two distinct sizes."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return {"fixed_us": my - slope * mx, "per_tensor_us": slope}


def scale_fits(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float] | None]]:
    """Fixed and per-Tensor cost of the class call and of its ``torch.ops`` path, per kind.

    Example:
        >>> rows = [{"kind": "args", "n": n, "impl": "opclass", "us": 1.0 + 0.1 * n} for n in (1, 3)]
        >>> round(scale_fits(rows)["args"]["opclass"]["per_tensor_us"], 3)
        0.1
    """
    out: dict[str, dict[str, dict[str, float] | None]] = {}
    for kind in ("args", "list"):
        for impl in ("opclass", "MyOp.op"):
            points = [(float(r["n"]), float(r["us"])) for r in rows if r["kind"] == kind and r["impl"] == impl]
            if points:
                out.setdefault(kind, {})[impl] = _fit(points)
    return out


# --- Definition cost and compile time: each figure from a fresh process. ---------------------------------


#: The repository root: the directory that holds the ``benchmarks`` package.
ROOT = Path(__file__).resolve().parent.parent


def _child_env() -> dict[str, str]:
    """The environment for a child: this process's, with this process's opclass, then ``benchmarks``, first on the path."""
    env = dict(os.environ)
    roots = [str(Path(opclass.__file__).resolve().parent.parent), str(ROOT)]
    paths = [*dict.fromkeys(roots)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _python_child(code: str, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` in a fresh interpreter and return the JSON it printed last."""
    proc = subprocess.run([sys.executable, "-c", code], env=env or _child_env(), capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}): {_last_error(proc.stderr)}")
    return json.loads(lines[-1])


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _define_many(kind: str, n_ops: int) -> dict[str, float]:
    """Define ``n_ops`` clone ops the ``kind`` way and call the first once (run in a fresh process)."""
    prefix = f"{_NS}{next(_FRESH)}_define_{kind.replace('/', '_')}"
    x = torch.randn(4)
    ops: list[Callable[..., Any]] = []
    # The package's own import is not a definition: opclass loads its modules on first use of
    # ``opclass.CustomOp`` (torch.library comes with torch), so that is timed on its own.
    start = time.perf_counter()
    if kind == "opclass":
        opclass.CustomOp  # noqa: B018
    import_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    if kind == "opclass":
        for i in range(n_ops):

            class Clone(opclass.CustomOp, name=f"{prefix}::clone{i}"):
                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x.clone()

                @staticmethod
                def abstract(x: Tensor) -> Tensor:
                    return torch.empty_like(x)

                setup_context = staticmethod(_save_nothing)

                @staticmethod
                def backward(ctx: Any, grad: Tensor) -> Tensor:
                    return grad

            ops.append(Clone)
    elif kind == "custom_op":
        ns: dict[str, Any] = {"Tensor": Tensor, "torch": torch}
        for i in range(n_ops):
            custom = torch.library.custom_op(f"{prefix}::clone{i}", mutates_args=())(_make_function("clone", "return a0.clone()", 1, ns))
            custom.register_fake(lambda a: torch.empty_like(a))
            custom.register_autograd(lambda ctx, grad: grad, setup_context=_save_nothing)
            ops.append(custom)
    elif kind == "define/impl":
        lib = torch.library.Library(prefix, "FRAGMENT")
        for i in range(n_ops):
            lib.define(f"clone{i}(Tensor x) -> Tensor")
            lib.impl(f"clone{i}", lambda x: x.clone(), "CPU")
        ops.append(getattr(torch.ops, prefix).clone0.default)
    else:
        raise ValueError(f"unknown definition kind {kind!r}")
    total = time.perf_counter() - start
    start = time.perf_counter()
    ops[0](x)
    first = time.perf_counter() - start
    return {"total_s": total, "ms_per_op": total / n_ops * 1e3, "first_call_ms": first * 1e3, "import_ms": import_ms}


def definition_cost(n_ops: int = 200) -> dict[str, dict[str, float]]:
    """Seconds to define ``n_ops`` ops (opclass, custom_op, define/impl), each in a fresh process.

    Example:
        >>> definition_cost(200)["opclass"]["ms_per_op"]  # doctest: +SKIP
        0.4
    """
    return {
        kind: _python_child(f"import json, benchmarks.benchmark as b; print(json.dumps(b._define_many({kind!r}, {n_ops})))")
        for kind in ("opclass", "custom_op", "define/impl")
    }


def compile_cost(n_calls: int = 400) -> dict[str, Any]:
    """Seconds to compile ``n_calls`` chained calls (class call, ``MyOp.op``, custom_op), fresh processes.

    Measured by :func:`benchmarks.compile_bench.compile_time`.

    Example:
        >>> compile_cost(400)["seconds"]["class"]  # doctest: +SKIP
        3.1
    """
    from .compile_bench import compile_time

    source = "benchmarks.compile_bench"
    seconds = {via: float(compile_time(n_calls=n_calls, via=via)) for via in ("class", "op", "custom_op")}
    return {"n_calls": n_calls, "source": source, "seconds": seconds}


# --- Targets and checks. ---------------------------------------------------------------------------------


def _lookup(rows: list[dict[str, Any]], n: int, scenario: str, impl: str) -> float:
    return float(next(r["us"] for r in rows if r["args"] == n and r["scenario"] == scenario and r["impl"] == impl))


#: The limit, for every guard, on a class call with out= against a direct call of its out-style
#: kernel: a no-grad call's (1 arg: no-grad / direct); the native guard's is 1.2.
OUT_LIMIT = 1.5
#: (name, scenario, impl, baseline scenario, baseline impl, limit, native-guard limit)
_TARGETS = [
    ("no-grad / direct", "no-grad", "opclass", "no-grad", "direct", 2.0, 1.25),
    ("inference_mode / direct", "inference_mode", "opclass", "inference_mode", "direct", 2.0, 1.25),
    ("grad / Function C apply", "grad", "opclass", "grad", "Function C apply", 1.15, 1.1),
    ("mutable / direct", "mutable", "opclass", "mutable", "direct", 2.5, 1.5),
    ("guard fails / MyOp.op", "guard fails (subclass)", "opclass", "guard fails (subclass)", "MyOp.op", 1.05, None),
    ("torch.ops / define-impl", "torch.ops", "opclass", "torch.ops", "define/impl", 1.2, None),
]


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fast-path targets as measured ratios: 14-argument scenarios, and 1-argument no-grad.

    ``limit`` is the target for every guard; ``native_limit`` the stricter native-guard one.

    Example:
        >>> checks = targets(run(min_run_time=0.01, counts=(1, 14)))  # doctest: +SKIP
        >>> [c["target"] for c in checks if not c["met"]]  # doctest: +SKIP
        []
    """
    out: list[dict[str, Any]] = []
    counts = {r["args"] for r in rows}

    def add(name: str, ratio: float, limit: float, native_limit: float | None, op: str = "<=") -> None:
        met = ratio <= limit if op == "<=" else ratio >= limit
        native = None if native_limit is None else ratio <= native_limit
        out.append({"target": name, "ratio": ratio, "limit": f"{op} {limit}", "met": met, "native_limit": native_limit, "native_met": native})

    if 14 in counts:
        for name, s, i, bs, bi, limit, native in _TARGETS:
            add(f"14 args: {name}", _lookup(rows, 14, s, i) / _lookup(rows, 14, bs, bi), limit, native)
        add("14 args: custom_op grad / opclass grad", _lookup(rows, 14, "grad", "custom_op") / _lookup(rows, 14, "grad", "opclass"), 8.0, None, ">=")
    if 1 in counts:
        add("1 arg: no-grad / direct", _lookup(rows, 1, "no-grad", "opclass") / _lookup(rows, 1, "no-grad", "direct"), 1.5, 1.15)
        add("1 arg: out= / direct out kernel", _lookup(rows, 1, "out=", "opclass") / _lookup(rows, 1, "out=", "direct"), OUT_LIMIT, 1.2)
    return out


def _scale_us(rows: list[dict[str, Any]], kind: str, n: int, impl: str) -> float | None:
    return next((float(r["us"]) for r in rows if r["kind"] == kind and r["n"] == n and r["impl"] == impl), None)


def done_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks one guard's result must meet: ``{check, value, limit, met, note}`` rows.

    The limits depend on ``result["guard"]`` (some checks apply to one guard only); checks whose
    figures were not measured (no 14-argument rows, no ``--scale``) are left out.

    Example:
        >>> [c["check"] for c in done_checks({"guard": "python", "rows": []})]
        []
    """
    python = result["guard"] == "python"
    rows = result["rows"]
    counts = {r["args"] for r in rows}
    scale = result.get("scale") or {}
    srows = scale.get("rows", [])

    def ratio(n: int, scenario: str, base: str) -> float | None:
        return _lookup(rows, n, scenario, "opclass") / _lookup(rows, n, scenario, base) if n in counts else None

    def scale_ratio(kind: str, n: int, base: str) -> float | None:
        cls, other = _scale_us(srows, kind, n, "opclass"), _scale_us(srows, kind, n, base)
        return cls / other if cls and other else None

    def model_ratio(step: str, mode: str, impl: str, base: str) -> float | None:
        rows = {(r["step"], r["mode"], r["impl"]): float(r["us"]) for r in (result.get("model") or {}).get("rows", [])}
        us, base_us = rows.get((step, mode, impl)), rows.get((step, mode, base))
        return us / base_us if us and base_us else None

    def provider_cost(n: int, impl: str) -> float | None:
        return _lookup(rows, n, "providers", impl) - _lookup(rows, n, "providers", "opclass, one kernel") if n in counts else None

    def provider_ratio(n: int, impl: str, base: str) -> float | None:
        return _lookup(rows, n, "providers", impl) / _lookup(rows, n, "providers", base) if n in counts else None

    def tabled_cost(n: int) -> float | None:
        return _lookup(rows, n, "providers", "opclass, 2 providers, tuning table") - _lookup(rows, n, "providers", "direct") if n in counts else None

    def predicate_cost(n: int) -> float | None:
        if n not in counts:
            return None
        return _lookup(rows, n, "providers", "opclass, 3 providers, predicate") - _lookup(rows, n, "providers", "opclass, 3 providers") - _lookup(rows, n, "providers", "predicate alone")

    worst = max(((scale_ratio(r["kind"], r["n"], "MyOp.op") or 0.0, f"worst: {r['kind']} {r['n']}") for r in srows if r["impl"] == "opclass"), default=None)
    fits = scale.get("fits", {})
    per_tensor = {kind: (fits.get(kind, {}).get("opclass") or {}).get("per_tensor_us") for kind in ("args", "list")}
    definition = scale.get("definition", {}).get("opclass") or {}
    seconds = scale.get("compile", {}).get("seconds")
    #: (check, value, Python-guard limit, native-guard limit, note)
    candidates: list[tuple[str, float | None, float | None, float | None, str]] = [
        ("14 args: no-grad / direct", ratio(14, "no-grad", "direct"), 2.0, 1.25, ""),
        ("14 args: inference_mode / direct", ratio(14, "inference_mode", "direct"), 2.0, 1.25, ""),
        ("14 args: mutable / direct", ratio(14, "mutable", "direct"), 2.5, 1.5, ""),
        ("14 args: grad / Function C apply", ratio(14, "grad", "Function C apply"), 1.3, 1.1, ""),
        ("1 arg: grad / Function C apply", ratio(1, "grad", "Function C apply"), 1.3, None, ""),
        ("1 arg: no-grad / direct", ratio(1, "no-grad", "direct"), 1.5, 1.15, ""),
        ("1 arg: out= / direct out kernel", ratio(1, "out=", "direct"), OUT_LIMIT, 1.2, ""),
        ("scale: 64 args / direct", scale_ratio("args", 64, "direct"), None, 1.4, ""),
        ("scale: list of 512 / direct", scale_ratio("list", 512, "direct"), None, 2.5, ""),
        ("scale: class / MyOp.op, every size", worst[0] if worst else None, 1.0, 1.0, worst[1] if worst else ""),
        ("scale: class per-Tensor us (args fit)", per_tensor["args"], 0.25, None, ""),
        ("scale: class per-Tensor us (list fit)", per_tensor["list"], 0.25, None, ""),
        ("definition: ms per op", definition.get("ms_per_op"), 0.5, 0.5, ""),
        ("definition: first call ms", definition.get("first_call_ms"), 2.0, 2.0, ""),
        ("compile: class / op", seconds["class"] / seconds["op"] if seconds else None, 1.05, 1.05, ""),
        ("providers: 3 providers - one kernel, us", provider_cost(1, "opclass, 3 providers"), None, 0.1, "choosing costs nothing without a predicate"),
        ("providers: predicate - no predicate - predicate alone, us", predicate_cost(1), None, 0.15, "a predicate costs about its own call"),
        ("providers: a block in another thread / no block", provider_ratio(1, "opclass, 3 providers, a block in another thread", "opclass, 3 providers"), None, 1.1, "other contexts keep the fast path"),
        ("providers: tuning table - direct, us", tabled_cost(1), None, 0.3, "the table's choice: the bucket tested in C"),
        ("providers: inside a block / direct", provider_ratio(1, "opclass, 3 providers, inside a block naming it", "direct"), None, 1.5, "the block's choice, cached"),
        ("model: eager infer, opclass / plain", model_ratio("infer", "eager", "opclass", "plain"), 1.15, 1.05, ""),
        ("model: eager train, opclass / Function", model_ratio("train", "eager", "opclass", "autograd.Function"), 1.1, 1.1, ""),
        ("model: eager train, eager_autograd / plain", model_ratio("train", "eager", "opclass eager_autograd", "plain"), 1.1, 1.1, ""),
        ("model: compiled infer, traceable / plain", model_ratio("infer", "compiled", "opclass traceable", "plain"), 1.1, 1.1, ""),
        ("model: compiled train, traceable / plain", model_ratio("train", "compiled", "opclass traceable", "plain"), 1.1, 1.1, ""),
    ]
    out: list[dict[str, Any]] = []
    for check, value, python_limit, native_limit, note in candidates:
        limit = python_limit if python else native_limit
        if value is not None and limit is not None:
            out.append({"check": check, "value": value, "limit": limit, "met": value <= limit, "note": note})
    return out


# --- One guard's measurement, repeated runs, and guards in subprocesses. ---------------------------------


def measure(
    min_run_time: float = 1.0,
    counts: tuple[int, ...] = (1, 14),
    device: str = "cpu",
    scale: bool = False,
    scale_args: tuple[int, ...] = SCALE_ARGS,
    scale_lists: tuple[int, ...] = SCALE_LISTS,
    define_ops: int = 200,
    compile_calls: int = 400,
    model: bool = False,
    model_backend: str = "inductor",
) -> dict[str, Any]:
    """Everything measured with this process's guard, plus the derived tables (:func:`finish`).

    ``define_ops`` or ``compile_calls`` of 0 leaves that part of ``--scale`` out; ``model`` adds
    the model steps of :func:`benchmarks.model_bench.run_model` (``model_backend``: the compiled
    steps' backend, ``""`` for none).

    Example:
        >>> result = measure(min_run_time=0.01, counts=(1,))  # doctest: +SKIP
        >>> sorted(result)  # doctest: +SKIP
        ['device', 'done', 'guard', 'guard_info', 'rows', 'runs', 'targets', 'torch']
    """
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "device": device,
        "guard": opclass.guard_backend(),
        "guard_info": opclass.guard_info(),
        "runs": 1,
        "rows": run(min_run_time, counts, device),
    }
    if scale:
        part: dict[str, Any] = {"rows": run_scale(min_run_time, scale_args, scale_lists, device)}
        if define_ops:
            part["definition"] = definition_cost(define_ops)
        if compile_calls:
            part["compile"] = compile_cost(compile_calls)
        result["scale"] = part
    if model:
        from .model_bench import run_model

        result["model"] = run_model(min_run_time, model_backend, device)
    return finish(result)


def finish(result: dict[str, Any]) -> dict[str, Any]:
    """Recompute the derived parts (targets, fits, done checks) from the measured figures.

    Example:
        >>> finish({"guard": "python", "rows": []})["done"]
        []
    """
    result["targets"] = targets(result["rows"])
    if "scale" in result:
        result["scale"]["fits"] = scale_fits(result["scale"]["rows"])
    result["done"] = done_checks(result)
    return result


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from repeated runs of one guard: every measured figure is the median of the runs.

    Example:
        >>> def measured(us):
        ...     return {"guard": "python", "rows": [{"args": 2, "scenario": "no-grad", "impl": "direct", "us": us}]}
        >>> median_result([measured(1.0), measured(3.0), measured(2.0)])["rows"][0]["us"]
        2.0
    """
    first = results[0]
    out = {k: v for k, v in first.items() if k not in ("rows", "scale", "model", "targets", "done")}
    out["runs"] = len(results)

    def rows_median(all_rows: list[list[dict[str, Any]]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
        merged = []
        for row in all_rows[0]:
            same = [r["us"] for rows in all_rows for r in rows if key(r) == key(row)]
            merged.append(dict(row, us=_median(same)))
        return merged

    out["rows"] = rows_median([r["rows"] for r in results], lambda r: (r["args"], r["scenario"], r["impl"]))
    if "scale" in first:
        scales = [r["scale"] for r in results]
        part: dict[str, Any] = {"rows": rows_median([s["rows"] for s in scales], lambda r: (r["kind"], r["n"], r["impl"]))}
        if "definition" in first["scale"]:
            part["definition"] = {
                kind: {field: _median([s["definition"][kind][field] for s in scales]) for field in fields}
                for kind, fields in first["scale"]["definition"].items()
            }
        if "compile" in first["scale"]:
            part["compile"] = dict(first["scale"]["compile"])
            part["compile"]["seconds"] = {via: _median([s["compile"]["seconds"][via] for s in scales]) for via in first["scale"]["compile"]["seconds"]}
        out["scale"] = part
    if "model" in first:
        model_rows = rows_median([r["model"]["rows"] for r in results], lambda r: (r["step"], r["mode"], r["impl"]))
        out["model"] = dict(first["model"], rows=model_rows)
    return finish(out)


def _child_measure(guard: str, forwarded: list[str]) -> dict[str, Any]:
    """One full measurement in a fresh process with ``OPCLASS_GUARD=guard`` (``active``: unchanged)."""
    env = _child_env()
    if guard != "active":
        env["OPCLASS_GUARD"] = guard
    command = [sys.executable, "-m", "benchmarks", "--json", "--guard", "active", "--runs", "1", *forwarded]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(_last_error(proc.stderr))
    result: dict[str, Any] = json.loads(proc.stdout)
    if guard != "active" and result["guard"] != guard:
        raise RuntimeError(f"asked for the {guard} guard, the child ran {result['guard_info']}")
    return result


def collect(
    guard: str, runs: int, forwarded: list[str], child: Callable[[str, list[str]], dict[str, Any]] = _child_measure
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Results per guard name (medians over ``runs`` subprocesses) and the guards left out, with why.

    A native guard that cannot be built or loaded is reported in the second dict and replaced by the
    Python guard.

    Example:
        >>> results, skipped = collect("both", 1, ["--min-run-time", "0.01"])  # doctest: +SKIP
        >>> sorted(results)  # doctest: +SKIP
        ['native', 'python']
    """
    wanted = {"active": ["active"], "native": ["native"], "python": ["python"], "both": ["native", "python"]}[guard]
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name in wanted:
        try:
            per_run = [child(name, forwarded) for _ in range(runs)]
        except RuntimeError as e:
            if name != "native":
                raise
            skipped["native"] = str(e)
            print(f"native guard unavailable ({e}); continuing with the Python guard", file=sys.stderr)
            if "python" not in wanted:
                wanted.append("python")
            continue
        merged = median_result(per_run)
        results[merged["guard"]] = merged
    return results, skipped


# --- Printing: one column (group) per guard. -------------------------------------------------------------


def _cell(value: float | None, fmt: str, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}{fmt}}"


def print_tables(results: dict[str, dict[str, Any]], min_run_time: float, out: Any = None) -> None:
    """Print every table with one column group per guard (``results``: guard name to result).

    Example:
        >>> print_tables({"python": measure(min_run_time=0.01, counts=(1,))}, 0.01)  # doctest: +SKIP
    """

    def say(line: str = "") -> None:
        print(line.rstrip(), file=out or sys.stdout)

    guards = list(results)
    first = results[guards[0]]
    say(f"torch {first['torch']}, device {first['device']}, median us per call (min_run_time={min_run_time}s, runs={first['runs']})")
    for g in guards:
        say(f"  guard {results[g]['guard_info']}")

    if first["rows"]:
        _print_calls(results, say)

    if first["targets"]:
        say()
        say("Targets: the ratio of two rows above (opclass's row / the row it is compared with), against the limit every")
        say("guard must meet (limit) and the stricter one for the native guard (native); met: yes or NO.")
        say(f"{'target':<44} {'limit':<7} {'native':<7}" + "".join(f" {g + ' ratio':>13} {'met':<4} {'native':<6}" for g in guards))
        for c in first["targets"]:
            native_limit = "" if c["native_limit"] is None else f"<= {c['native_limit']}"
            line = f"{c['target']:<44} {c['limit']:<7} {native_limit:<7}"
            for g in guards:
                m = next(x for x in results[g]["targets"] if x["target"] == c["target"])
                native_met = "" if m["native_met"] is None else ("yes" if m["native_met"] else "NO")
                line += f" {m['ratio']:13.2f} {'yes' if m['met'] else 'NO':<4} {native_met:<6}"
            say(line)

    if "scale" in first:
        _print_scale(results, say)
    if "model" in first:
        _print_model(results, say)
    _print_done(results, say)


def _print_calls(results: dict[str, dict[str, Any]], say: Callable[..., None]) -> None:
    guards = list(results)
    say()
    for line in _LEGEND:
        say(line)
    say(f"{'args':>4}  {'scenario':<24} {'impl':<18}" + "".join(f" {g + ' us':>10} {'x direct':>9}" for g in guards))
    for r in results[guards[0]]["rows"]:
        line = f"{r['args']:>4}  {r['scenario']:<24} {r['impl']:<18}"
        for g in guards:
            rows = results[g]["rows"]
            us = next(x["us"] for x in rows if (x["args"], x["scenario"], x["impl"]) == (r["args"], r["scenario"], r["impl"]))
            direct = next((x["us"] for x in rows if x["args"] == r["args"] and x["scenario"] == r["scenario"] and x["impl"] == "direct"), None)
            line += f" {us:10.2f} " + (f"{us / direct:8.2f}x" if direct else " " * 9)
        say(line)


#: What the first table's rows compare, for a reader who has not read this file.
_LEGEND = (
    "Each row: one way to define an op (impl), called one way (scenario), with `args` Tensor arguments; the",
    "kernel is the same everywhere (it clones its first argument), so the differences are call overhead.",
    "  impl:     direct = the kernel called as a plain function; define/impl = torch.library.Library define + impl;",
    "            custom_op = torch.library.custom_op; Function C apply = an autograd.Function's apply, the",
    "            floor for a call that records grad; MyOp.op = the torch.ops overload; opclass = the class call MyOp(x)",
    "  scenario: no-grad = no input needs grad; grad = inputs need grad; inference_mode; mutable = the op writes",
    "            to an argument; guard fails (subclass) = a Tensor subclass, which the dispatcher must handle;",
    "            torch.ops = each definition called through torch.ops; out= = an op whose kernel writes into a",
    "            keyword-only out buffer (out-style), called with out=buf: direct = that kernel called with out=buf,",
    "            opclass = MyOp(x, out=buf), MyOp.out = the .out overload's class, torch.ops .out = torch.ops.ns.op.out",
    "  native us, python us: median microseconds per call with that guard (opclass's check that a call is plain)",
    "  x direct: this row's time / the direct row's time in the same scenario",
)


def _print_scale(results: dict[str, dict[str, Any]], say: Callable[..., None]) -> None:
    guards = list(results)
    first = results[guards[0]]["scale"]
    say()
    say("scaling, no-grad, us per call; x direct / x ops: the class call's ratio to direct and to MyOp.op")
    head = "".join(f" {'direct':>8} {'opclass':>8} {'MyOp.op':>8} {'custom_op':>9} {'def/impl':>8} {'x direct':>8} {'x ops':>6} |" for _ in guards)
    say(f"{'':<11}" + "".join(f" {'--- ' + g + ' guard ---':<67}|" for g in guards))
    say(f"{'Tensors':<11}" + head)
    for kind, n in dict.fromkeys((r["kind"], r["n"]) for r in first["rows"]):
        line = f"{(f'{n} args' if kind == 'args' else f'list {n}'):<11}"
        for g in guards:
            srows = results[g]["scale"]["rows"]
            us = {impl: _scale_us(srows, kind, n, impl) for impl in _SCALE_IMPLS}
            cls, direct, ops = us["opclass"], us["direct"], us["MyOp.op"]
            line += (
                f" {_cell(direct, '.2f', 8)} {_cell(cls, '.2f', 8)} {_cell(ops, '.2f', 8)} {_cell(us['custom_op'], '.2f', 9)}"
                f" {_cell(us['define/impl'], '.2f', 8)} {_cell(cls / direct if cls and direct else None, '.2f', 8)}"
                f" {_cell(cls / ops if cls and ops else None, '.2f', 6)} |"
            )
        say(line)
    for g in guards:
        fits = results[g]["scale"]["fits"]
        for kind in ("args", "list"):
            parts = []
            for impl, label in (("opclass", "class call"), ("MyOp.op", "torch.ops")):
                fit = fits.get(kind, {}).get(impl)
                if fit:
                    parts.append(f"{label} {fit['fixed_us']:.2f} us + {fit['per_tensor_us']:.3f} us/Tensor")
            if parts:
                say(f"  {g} guard, {kind} fit: " + "; ".join(parts))

    if "definition" in first:
        say()
        n_ops = None
        say(f"{'definition':<12}" + "".join(f" {g + ' total s':>16} {'ms/op':>7} {'1st call ms':>11} {'import ms':>9}" for g in guards))
        for kind in first["definition"]:
            line = f"{kind:<12}"
            for g in guards:
                d = results[g]["scale"]["definition"][kind]
                n_ops = round(d["total_s"] / d["ms_per_op"] * 1e3)
                line += f" {d['total_s']:16.3f} {d['ms_per_op']:7.3f} {d['first_call_ms']:11.3f} {d.get('import_ms', 0.0):9.1f}"
            say(line)
        say(f"  ({n_ops} ops each, fresh process per cell; import ms: loading the package's modules on first use, timed apart")
        say("   from the definitions; without cached bytecode (PYTHONDONTWRITEBYTECODE) it includes compiling them)")
    if "compile" in first:
        say()
        c = first["compile"]
        say(f"compile {c['n_calls']} chained calls, aot_eager, fullgraph (seconds, fresh process; {c['source']})")
        say(f"{'via':<12}" + "".join(f" {g + ' s':>12}" for g in guards))
        for via in c["seconds"]:
            say(f"{via:<12}" + "".join(f" {results[g]['scale']['compile']['seconds'][via]:12.2f}" for g in guards))


def _print_model(results: dict[str, dict[str, Any]], say: Callable[..., None]) -> None:
    guards = list(results)
    first = results[guards[0]]["model"]
    say()
    say(
        f"model steps: examples/decoder_block.py, batch {first['batch']}, sequence {first['seq']}; us per step; x plain: this"
    )
    say(f"row / the plain functions' row of the same step (compiled: torch.compile fullgraph, backend {first['backend'] or '-'})")
    say(f"{'step':<6} {'mode':<9} {'impl':<23}" + "".join(f" {g + ' us':>10} {'x plain':>8}" for g in guards))
    for r in first["rows"]:
        line = f"{r['step']:<6} {r['mode']:<9} {r['impl']:<23}"
        for g in guards:
            rows = {(x["step"], x["mode"], x["impl"]): x["us"] for x in results[g]["model"]["rows"]}
            us, plain = rows[(r["step"], r["mode"], r["impl"])], rows[(r["step"], r["mode"], "plain")]
            line += f" {us:10.1f} {us / plain:7.3f}x"
        say(line)


def _print_done(results: dict[str, dict[str, Any]], say: Callable[..., None]) -> None:
    guards = list(results)
    # Each guard's checks come in the canonical order, some guards skipping some: merge keeping it.
    checks: list[str] = []
    for g in guards:
        at = 0
        for c in results[g]["done"]:
            if c["check"] in checks:
                at = checks.index(c["check"]) + 1
            else:
                checks.insert(at, c["check"])
                at += 1
    if not checks:
        return
    say()
    say("targets met: each figure above (and the --scale tables') against its limit for that guard; '-': not measured")
    say(f"{'check':<44}" + "".join(f" {g + ' limit':>14} {'value':>8} {'met':<4}" for g in guards))
    for check in checks:
        line, notes = f"{check:<44}", []
        for g in guards:
            c = next((x for x in results[g]["done"] if x["check"] == check), None)
            if c is None:
                line += f" {'-':>14} {'':>8} {'':<4}"
            else:
                line += f" {'<= ' + format(c['limit'], 'g'):>14} {c['value']:8.3f} {'yes' if c['met'] else 'NO':<4}"
                if c["note"]:
                    notes.append(f"{g}: {c['note']}")
        say(line + ("  (" + "; ".join(notes) + ")" if notes else ""))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def tune(path: str, target: str | None, min_run_time: float) -> opclass.Tuning:
    """``--tune PATH``: ``opclass.tune_providers`` on the benchmark's provider op (two providers of
    one kernel; samples of 16, 4096 and 2**20 elements), or with ``--tune-op module:Class`` on that
    op's samples; prints the tables and saves the tuning table to ``PATH`` (for ``OPCLASS_TUNING``
    or ``opclass.load_tuning``).

    Example:
        >>> tune("tuning.json", "examples/providers.py:RMSNorm", 0.01).order  # doctest: +SKIP
        ('cpp', 'numpy', 'default')
    """
    if target is None:
        op = _define_ops(1, f"{_NS}_tune")["tabled"]
        tuned = opclass.tune_providers(op, [(torch.randn(size),) for size in (16, 4096, 1 << 20)], min_run_time=min_run_time)
    else:
        tuned = opclass.tune_providers(_op_class(target), min_run_time=min_run_time)
    tuned.save(path)
    return tuned


def _op_class(target: str) -> Any:
    """The op class ``module:Class`` names (the module: a name, or a ``.py`` path)."""
    import importlib
    import importlib.util

    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def main(argv: list[str] | None = None) -> int:
    """Command line: print the tables (or ``--json``).

    Example:
        >>> main(["--min-run-time", "0.01", "--args", "1"])  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per measurement (default 1.0)")
    parser.add_argument("--args", type=int, nargs="*", default=[1, 14], help="Tensor argument counts (default 1 14)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--guard",
        choices=("active", "native", "python", "both"),
        default="active",
        help="active: the guard chosen at import, in this process; otherwise one subprocess per guard (default active)",
    )
    parser.add_argument("--scale", action="store_true", help="add the scaling, definition-cost and compile-time tables")
    parser.add_argument("--scale-args", type=_ints, default=SCALE_ARGS, help="Tensor-argument counts for --scale (default 1,2,4,8,14,32,64)")
    parser.add_argument("--scale-lists", type=_ints, default=SCALE_LISTS, help="list[Tensor] lengths for --scale (default 1,8,64,512)")
    parser.add_argument("--define-ops", type=int, default=200, help="ops defined for the definition cost; 0: skip (default 200)")
    parser.add_argument("--compile-calls", type=int, default=400, help="chained calls compiled; 0: skip (default 400)")
    parser.add_argument("--runs", type=int, default=1, help="repeat everything in fresh subprocesses, report medians (default 1)")
    parser.add_argument("--model", action="store_true", help="add the model-step table (examples/decoder_block.py; `--args` alone: no per-call table)")
    parser.add_argument("--model-backend", default="inductor", help="torch.compile backend of the compiled model steps; '': none (default inductor)")
    parser.add_argument("--tune", metavar="PATH", help="only time the providers of the benchmark's provider op per bucket of arguments, print the tables, and save the tuning table to PATH")
    parser.add_argument("--tune-op", metavar="MODULE:CLASS", help="with --tune: tune this op class on its samples instead (a module name or a .py path)")
    ns = parser.parse_args(argv)
    if ns.tune:
        tuned = tune(ns.tune, ns.tune_op, ns.min_run_time)
        print(f"order: {','.join(tuned.order)}\nsaved to {ns.tune}: OPCLASS_TUNING={ns.tune} or opclass.load_tuning({ns.tune!r}) uses it")
        return 0
    start = time.perf_counter()
    skipped: dict[str, str] = {}
    if ns.guard == "active" and ns.runs == 1:
        result = measure(
            ns.min_run_time, tuple(ns.args), ns.device, ns.scale, ns.scale_args, ns.scale_lists, ns.define_ops, ns.compile_calls,
            ns.model, ns.model_backend,
        )
        results = {result["guard"]: result}
    else:
        forwarded = ["--min-run-time", str(ns.min_run_time), "--device", ns.device, "--args", *map(str, ns.args)]
        if ns.scale:
            forwarded += ["--scale", "--scale-args", ",".join(map(str, ns.scale_args)), "--scale-lists", ",".join(map(str, ns.scale_lists))]
            forwarded += ["--define-ops", str(ns.define_ops), "--compile-calls", str(ns.compile_calls)]
        if ns.model:
            forwarded += ["--model", f"--model-backend={ns.model_backend}"]
        results, skipped = collect(ns.guard, max(ns.runs, 1), forwarded)
    elapsed = time.perf_counter() - start
    if ns.json:
        payload: dict[str, Any]
        if ns.guard == "both":
            payload = {"torch": torch.__version__, "device": ns.device, "guards": results}
        else:
            payload = dict(next(iter(results.values())))
        if skipped:
            payload["skipped"] = skipped
        print(json.dumps(payload, indent=2))
        return 0
    print_tables(results, ns.min_run_time)
    for name, why in skipped.items():
        print(f"\n{name} guard left out: {why}")
    print(f"\nmeasured in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
