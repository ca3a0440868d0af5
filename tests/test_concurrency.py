"""Thread safety: op calls, definitions, redefinitions and removals from several threads at once.

* **Calls.** Eight threads call the same three ops (a functional op with a backward formula, a
  mutating op, a two-output op with a formula) 300 times each, released together by a barrier
  and meeting again at every quarter of the run (so they overlap whatever the scheduler does),
  each in its own mode: grad enabled with ``requires_grad`` inputs and ``backward``, ``torch.no_grad()``,
  ``torch.inference_mode()``, and plain tensors. Everything a thread sees (outputs, gradients,
  version counters, final values of the tensor it mutates) must equal what the same calls give
  run serially, and each thread's grad / inference mode (thread-local in torch) must not leak into
  another: a ``no_grad`` thread never strips another thread's outputs of their ``grad_fn``. Also:
  per-thread mutated tensors lose no update; gradients of one shared leaf, per thread and
  accumulated by concurrent ``backward`` calls.
* **Definitions.** Eight threads define distinct ops at once and call them; eight threads redefine
  one name at once (afterwards every class object, ``torch.ops`` and the live class must run the
  same one of the definitions, with no exception on the way); ops defined and removed while other
  threads keep calling other ops of the same namespace.

``sys.setswitchinterval`` is set to 1 us inside each test (restored afterwards) to force frequent
thread switches. The tests run under whichever guard (native or pure Python)
opclass picked at import; run the file with ``OPCLASS_GUARD=python`` for the other one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
import torch
from torch import Tensor

import opclass
from opclass.install import record as records
from opclass import CustomOp
from _marks import NATIVE_GUARD_MISSING

T = TypeVar("T")

N_THREADS = 8
MODES = ("grad", "no_grad", "inference", "plain")  # thread i runs MODES[i % 4]
ITERATIONS = 300  # calls of each op per thread
JOIN_TIMEOUT_S = 120.0


@pytest.fixture(autouse=True)
def switch_often() -> Iterator[None]:
    """Make the interpreter switch threads as often as it can, for the duration of a test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def run_threads(target: Callable[[int], T], n: int = N_THREADS) -> list[T]:
    """Run ``target(0) ... target(n - 1)`` in ``n`` threads released together; re-raise the first error."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[tuple[int, BaseException]] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append((i, e))

    threads = [threading.Thread(target=body, args=(i,), name=f"opclass-test-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        i, e = errors[0]
        raise AssertionError(f"thread {i} of {n} raised {type(e).__name__}: {e} ({len(errors)} thread(s) raised)") from e
    return results


# --------------------------------------------------------------------------- concurrent calls


@dataclasses.dataclass
class Ops:
    mul: Any  # functional, setup_context + backward
    add_into: Any  # mutates dst
    sin_cos: Any  # two outputs, setup_context + backward


def define_ops(ns: str) -> Ops:
    class Mul(CustomOp, name=f"{ns}::mul"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, alpha: float) -> Tensor:
            return x * y * alpha

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
            x, y, alpha = inputs
            ctx.save_for_backward(x, y)
            ctx.alpha = alpha

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, y = ctx.saved_tensors
            return grad * y * ctx.alpha, grad * x * ctx.alpha, None

    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("dst",)):
        @staticmethod
        def cpu(dst: Tensor, src: Tensor) -> None:
            dst.add_(src)

    class SinCos(CustomOp, name=f"{ns}::sin_cos"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return x.sin(), x.cos()

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad_sin, grad_cos):  # type: ignore[no-untyped-def]
            (x,) = ctx.saved_tensors
            return grad_sin * x.cos() - grad_cos * x.sin()

    return Ops(Mul, AddInto, SinCos)


def mode_context(mode: str) -> contextlib.AbstractContextManager[Any]:
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference":
        return torch.inference_mode()
    return contextlib.nullcontext()


def check_mode(mode: str, outputs: list[Tensor]) -> None:
    """The thread's own mode is in force, and its outputs are what that mode makes."""
    assert torch.is_grad_enabled() == (mode in ("grad", "plain")), f"{mode} thread sees grad mode {torch.is_grad_enabled()}"
    assert torch.is_inference_mode_enabled() == (mode == "inference"), f"{mode} thread sees another thread's inference mode"
    for out in outputs:
        assert out.requires_grad == (mode == "grad"), f"{mode} thread got requires_grad={out.requires_grad}"
        assert (out.grad_fn is not None) == (mode == "grad"), f"{mode} thread got grad_fn={out.grad_fn}"
        assert out.is_inference() == (mode == "inference"), f"{mode} thread got is_inference={out.is_inference()}"


def worker(ops: Ops, index: int, iterations: int = ITERATIONS, sync: threading.Barrier | None = None) -> dict[str, list[Any]]:
    """Thread ``index``'s calls, in its mode; returns everything observable, for comparison.

    With ``sync``, the threads meet at every quarter of their iterations, so that they overlap
    all along whatever the scheduler does (and no thread finishes before the others start)."""
    mode = MODES[index % len(MODES)]
    gen = torch.Generator().manual_seed(1000 + index)
    grad = mode == "grad"
    x = torch.randn(16, generator=gen, dtype=torch.float64).requires_grad_(grad or mode == "no_grad")
    y = torch.randn(16, generator=gen, dtype=torch.float64).requires_grad_(grad or mode == "no_grad")
    dst = torch.zeros(16, dtype=torch.float64)  # this thread's own tensor; a normal (not inference) one
    seen: dict[str, list[Any]] = {"outputs": [], "grads": [], "versions": [], "grad_fns": []}
    for i in range(iterations):
        if sync is not None and i % (iterations // 4) == 0:
            sync.wait(JOIN_TIMEOUT_S)
        alpha = 0.5 + i
        with mode_context(mode):
            out = ops.mul(x, y, alpha)
            s, c = ops.sin_cos(x)
            src = torch.full((16,), float(i), dtype=torch.float64)
            v = dst._version
            assert ops.add_into(dst, src) is None
            seen["versions"].append(dst._version - v)
            check_mode(mode, [out, s, c])
        assert isinstance(out, Tensor) and type(s) is Tensor and type(c) is Tensor
        if grad:
            seen["grad_fns"].append((type(out.grad_fn).__name__, type(s.grad_fn).__name__))
            x.grad = y.grad = None
            (out.sum() + (s * c).sum()).backward()
            assert x.grad is not None and y.grad is not None
            seen["grads"].append((x.grad.clone(), y.grad.clone()))
        seen["outputs"].append((out.detach().clone(), s.detach().clone(), c.detach().clone()))
    seen["dst"] = [dst.clone(), dst._version]
    return seen


def assert_same(concurrent: dict[str, list[Any]], serial: dict[str, list[Any]], index: int) -> None:
    assert concurrent.keys() == serial.keys()
    for key in serial:
        got, want = concurrent[key], serial[key]
        assert len(got) == len(want), f"thread {index}: {key}"
        for j, (g, w) in enumerate(zip(got, want)):
            if isinstance(w, tuple):
                for gi, wi in zip(g, w):
                    if isinstance(wi, Tensor):
                        assert torch.equal(gi, wi), f"thread {index} ({MODES[index % 4]}): {key}[{j}] differs"
                    else:
                        assert gi == wi, f"thread {index}: {key}[{j}]: {gi} != {wi}"
            elif isinstance(w, Tensor):
                assert torch.equal(g, w), f"thread {index} ({MODES[index % 4]}): {key}[{j}] differs"
            else:
                assert g == w, f"thread {index}: {key}[{j}]: {g} != {w}"


def test_concurrent_calls_in_different_modes_match_serial_calls(ns: str) -> None:
    ops = define_ops(ns)
    serial = [worker(ops, i) for i in range(N_THREADS)]
    sync = threading.Barrier(N_THREADS)
    concurrent = run_threads(lambda i: worker(ops, i, sync=sync))
    for i in range(N_THREADS):
        assert_same(concurrent[i], serial[i], i)
    # Sanity of the reference itself: the modes did what they should.
    grad_thread = serial[MODES.index("grad")]
    assert set(grad_thread["grad_fns"]) == {("MulFunctionBackward", "SinCosFunctionBackward")}
    # Every call bumps dst's version by the same amount (the kernel's add_ and the op's own bump).
    per_call = serial[0]["versions"][0]
    assert per_call > 0 and all(serial[i]["versions"] == [per_call] * ITERATIONS for i in range(N_THREADS))
    expected_dst = torch.full((16,), float(sum(range(ITERATIONS))), dtype=torch.float64)
    for i in range(N_THREADS):
        assert torch.equal(serial[i]["dst"][0], expected_dst)
        assert serial[i]["dst"][1] == per_call * ITERATIONS


def test_main_thread_modes_do_not_leak_into_threads(ns: str) -> None:
    """Grad and inference mode are thread-local: a main thread inside no_grad/inference_mode does
    not change what other threads' calls give (new threads start in grad mode)."""
    ops = define_ops(ns)
    grad_index = MODES.index("grad")
    plain_index = MODES.index("plain")
    serial = [worker(ops, grad_index, 20), worker(ops, plain_index, 20)]
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            concurrent = run_threads(lambda i: worker(ops, (grad_index, plain_index)[i % 2], 20), n=4)
        for i, seen in enumerate(concurrent):
            assert_same(seen, serial[i % 2], (grad_index, plain_index)[i % 2])


def test_each_thread_mutates_only_its_own_tensor(ns: str) -> None:
    """Mutating calls on per-thread tensors interleave without lost updates or extra version bumps."""
    ops = define_ops(ns)
    n_calls = 2000
    tensors = [torch.zeros(4) for _ in range(N_THREADS)]
    ones = torch.ones(4)
    probe = torch.zeros(4)
    ops.add_into(probe, ones)
    per_call = probe._version  # version bumps of one call, serially

    def mutate(i: int) -> None:
        for _ in range(n_calls):
            ops.add_into(tensors[i], ones)

    run_threads(mutate)
    for t in tensors:
        assert torch.equal(t, torch.full((4,), float(n_calls)))
        assert t._version == n_calls * per_call


def test_shared_leaf_gradients_from_concurrent_backward(ns: str) -> None:
    """Threads share one leaf that requires grad. With torch.autograd.grad each thread gets the
    gradient of its own graph only; with backward() all of them accumulate into leaf.grad, and
    no contribution is lost."""
    ops = define_ops(ns)
    x = torch.linspace(-1, 1, 16, dtype=torch.float64, requires_grad=True)

    def grads(i: int) -> list[Tensor]:
        y = torch.full((16,), float(i + 1), dtype=torch.float64)
        got = []
        for _ in range(50):
            (g,) = torch.autograd.grad(ops.mul(x, y, 2.0).sum(), x)
            got.append(g)
        return got

    results = run_threads(grads)
    for i, got in enumerate(results):
        for g in got:
            assert torch.equal(g, torch.full((16,), 2.0 * (i + 1), dtype=torch.float64))
    assert x.grad is None

    def accumulate(i: int) -> None:
        y = torch.full((16,), float(i + 1), dtype=torch.float64)
        for _ in range(50):
            ops.mul(x, y, 2.0).sum().backward()
            s, c = ops.sin_cos(x)
            (s * 0 + c * 0).sum().backward()  # a second op's graph, contributing zeros

    run_threads(accumulate)
    expected = 50 * 2.0 * sum(i + 1 for i in range(N_THREADS))  # integers: exact in float64
    assert x.grad is not None and torch.equal(x.grad, torch.full((16,), expected, dtype=torch.float64))


# --------------------------------------------------------------------------- concurrent definitions


def define_scale(qualname: str, factor: float) -> Any:
    class Scale(CustomOp, name=qualname):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * factor

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad * factor

    return Scale


def test_concurrent_definitions_of_distinct_ops(ns: str) -> None:
    per_thread = 6
    x = torch.ones(3)

    def define_and_call(i: int) -> list[Any]:
        classes = []
        for k in range(per_thread):
            factor = float(10 * i + k)
            cls = define_scale(f"{ns}::scale_{i}_{k}", factor)
            classes.append(cls)
            assert torch.equal(cls(x), x * factor)
            assert torch.equal(getattr(getattr(torch.ops, ns), f"scale_{i}_{k}")(x), x * factor)
        return classes

    results = run_threads(define_and_call)
    # After all threads: every op is live, distinct, and runs its own kernel, with grad too.
    packet = getattr(torch.ops, ns)
    for i, classes in enumerate(results):
        for k, cls in enumerate(classes):
            factor = float(10 * i + k)
            assert cls.record.live and cls.qualname == f"{ns}::scale_{i}_{k}"
            assert torch.equal(cls(x), x * factor)
            assert torch.equal(getattr(packet, f"scale_{i}_{k}")(x), x * factor)
            leaf = torch.ones(3, requires_grad=True)
            cls(leaf).sum().backward()
            assert leaf.grad is not None and torch.equal(leaf.grad, torch.full((3,), factor))
    assert len({cls.record.qualname for classes in results for cls in classes}) == N_THREADS * per_thread


def test_first_grad_calls_from_many_threads_share_one_function(ns: str) -> None:
    """An op's autograd.Functions are made on its first call that needs one: eight threads making
    that first call at once (half through the class, half through torch.ops) all get right outputs
    and gradients, and one Function class per call path (10 fresh ops)."""
    for round_ in range(10):
        factor = float(round_ + 2)
        cls = define_scale(f"{ns}::first_{round_}", factor)
        op = getattr(getattr(torch.ops, ns), f"first_{round_}")

        def call(i: int) -> type:
            leaf = torch.ones(3, requires_grad=True)
            out = cls(leaf) if i % 2 == 0 else op(leaf)
            assert torch.equal(out.detach(), torch.full((3,), factor))
            out.sum().backward()
            assert leaf.grad is not None and torch.equal(leaf.grad, torch.full((3,), factor))
            return type(out.grad_fn)

        kinds = run_threads(call)
        # The Function a later call applies is the one every first caller got, on either path.
        later = [type(f(torch.ones(3, requires_grad=True)).grad_fn) for f in (cls, op)]
        assert all(k is later[0] for k in kinds[0::2]) and all(k is later[1] for k in kinds[1::2]), f"round {round_}: {kinds}"


def define_concurrently(qualname: str, factors: list[float]) -> tuple[list[Any], list[BaseException]]:
    """``len(factors)`` threads define ``qualname`` at once; their classes and what they raised."""
    errors: list[BaseException] = []

    def define(i: int) -> Any:
        try:
            return define_scale(qualname, factors[i])
        except Exception as e:  # collected: the test reports them together with the outcome
            errors.append(e)
            return None

    classes = run_threads(define, n=len(factors))
    return [c for c in classes if c is not None], errors


def assert_one_definition_wins(qualname: str, classes: list[Any], factors: list[float]) -> None:
    """One of ``factors`` is live, and torch.ops, the live class and every class object run it."""
    x = torch.ones(2)
    ns, name = qualname.split("::")
    via_torch_ops = getattr(getattr(torch.ops, ns), name)(x)
    winner = float(via_torch_ops[0])
    assert winner in factors
    live = records.lookup(qualname)
    assert live is not None and live.live
    live_cls = live.owner() if live.owner is not None else None
    assert live_cls is not None and torch.equal(live_cls(x), via_torch_ops)
    for cls in classes:
        assert cls.record is live
        got = cls(x)
        assert torch.equal(got, via_torch_ops), f"a class object runs x{float(got[0])}, torch.ops runs x{winner}"
        leaf = torch.ones(2, requires_grad=True)
        cls(leaf).sum().backward()
        assert leaf.grad is not None and torch.equal(leaf.grad, torch.full((2,), winner))


def test_concurrent_redefinitions_of_one_name_agree(ns: str) -> None:
    """Last definition wins: whichever thread's class ends up live, every class object (all
    retired but one) and torch.ops run it, and no class statement raises. The name is defined
    once beforehand, then 10 rounds of 8 threads redefine it."""
    qualname = f"{ns}::scale"
    define_scale(qualname, -1.0)
    rounds = []
    for round_ in range(10):
        factors = [float(100 * round_ + i) for i in range(N_THREADS)]
        classes, errors = define_concurrently(qualname, factors)
        assert not errors, f"round {round_}: {errors}"
        rounds.append(classes)
        assert_one_definition_wins(qualname, classes, factors)
    # Classes of earlier rounds follow the last round's winner too.
    factors = [float(100 * 9 + i) for i in range(N_THREADS)]
    assert_one_definition_wins(qualname, [c for classes in rounds for c in classes], factors)


def test_concurrent_first_definitions_of_one_name(ns: str) -> None:
    """Eight threads define the same, so far unused, name at once (20 names): none raises, and one
    definition wins as in the test above."""
    outcomes = []
    for round_ in range(20):
        qualname = f"{ns}::fresh_{round_}"
        factors = [float(100 * round_ + i) for i in range(N_THREADS)]
        outcomes.append((qualname, factors, *define_concurrently(qualname, factors)))
    errors = [f"{qualname}: {type(e).__name__}: {e}" for qualname, _, _, errs in outcomes for e in errs]
    assert not errors, f"{len(errors)} class statements raised, first: {errors[0]}"
    for qualname, factors, classes, _ in outcomes:
        assert_one_definition_wins(qualname, classes, factors)


def test_definition_and_removal_concurrent_with_calls_of_other_ops(ns: str) -> None:
    """Four threads call long-lived ops of the namespace (with and without grad) until four other
    threads have each defined, called and removed 25 ops of it (by class, by qualified name, and
    by removing a namespace of their own)."""
    ops = define_ops(ns)
    n_callers = n_churners = N_THREADS // 2
    min_calls = 100
    churners_left = [n_churners]
    lock = threading.Lock()
    failed = threading.Event()
    calls = [0] * n_callers
    x = torch.arange(8, dtype=torch.float64)  # integers: sums are exact

    def caller(i: int) -> None:
        leaf = x.clone().requires_grad_(i % 2 == 0)
        dst = torch.zeros(8, dtype=torch.float64)
        while not failed.is_set() and (churners_left[0] > 0 or calls[i] < min_calls):
            out = ops.mul(leaf, x, 3.0)
            s, c = ops.sin_cos(leaf)
            assert torch.equal(out.detach(), x * x * 3.0)
            assert torch.equal(s.detach(), x.sin()) and torch.equal(c.detach(), x.cos())
            if leaf.requires_grad:
                (g,) = torch.autograd.grad(out.sum(), leaf)
                assert torch.equal(g, x * 3.0)
            assert torch.equal(getattr(torch.ops, ns).mul(x, x, 2.0), x * x * 2.0)
            ops.add_into(dst, x)
            calls[i] += 1
        assert torch.equal(dst, x * calls[i]) or failed.is_set()

    def churner(i: int) -> None:
        own_ns = f"{ns}_own{i}"
        try:
            for k in range(25):
                factor = float(i * 100 + k)
                cls = define_scale(f"{ns}::churn_{i}_{k}", factor)
                assert torch.equal(cls(x), x * factor)
                own = define_scale(f"{own_ns}::churn_{k}", factor)
                assert torch.equal(own(x), x * factor)
                if k % 2 == 0:
                    opclass.remove(cls)
                else:
                    opclass.remove(f"{ns}::churn_{i}_{k}")
                opclass.remove_namespace(own_ns)
                for removed in (cls, own):
                    with pytest.raises(RuntimeError, match="was removed"):
                        removed(x)
                assert not hasattr(getattr(torch.ops, ns), f"churn_{i}_{k}")
        finally:
            opclass.remove_namespace(own_ns)

    def target(i: int) -> None:
        try:
            if i < n_callers:
                caller(i)
            else:
                churner(i)
        except BaseException:
            failed.set()  # the other threads stop instead of looping on
            raise
        finally:
            if i >= n_callers:
                with lock:
                    churners_left[0] -= 1

    run_threads(target)
    assert min(calls) >= min_calls
    # The long-lived ops are untouched by the churn.
    assert ops.mul.record.live and ops.sin_cos.record.live and ops.add_into.record.live
    assert torch.equal(ops.mul(x, x, 1.0), x * x)


# --------------------------------------------------------------------------- redefinition under load


@pytest.mark.parametrize("guard", ["native", "python"])
def test_calls_and_redefinitions_of_one_op_from_16_threads(guard: str) -> None:
    """16 threads, 10,000 steps in all: every fifth step runs the op's class statement again (2,000
    definitions), the others call it (8,000 calls) through the class object the thread holds (live
    or replaced since), ``torch.ops`` (packet and overload), with and without grad, checking
    values and gradients. No step may raise and the process must not crash (a redefinition
    used to write torch's dispatcher while other threads called the op: internal errors and
    segfaults). In a subprocess per guard, since a process chooses its guard once."""
    if guard == "native" and opclass.guard_backend() != "native":
        pytest.skip(NATIVE_GUARD_MISSING)
    script = Path(__file__).with_name("_stress_redefine.py")
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(script), "16", "625"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPCLASS_GUARD": guard},
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["guard"] == guard
    assert (result["definitions"], result["calls"]) == (2000, 8000)
    assert result["errors"] == [], f"{len(result['errors'])} errors, first: {result['errors'][:3]}"
