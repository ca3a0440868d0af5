"""Providers: several kernels of one op, chosen per call by device, availability, predicate,
order and mode, the same from the class call (either guard) and from ``torch.ops``, through
autograd, vmap, FakeTensor, torch.compile and torch.export; added from another module; held to
the reference by ``opclass.testing.check_op``; explained, profiled and tuned."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths

ROOT = Path(__file__).resolve().parent.parent


def make(ns: str, **extra: Any) -> Any:
    """An op whose kernels tell themselves apart: ``default`` adds 0, ``plus1`` 1 (float32 only),
    ``plus2`` 2 (batch-invariant), ``plus3`` 3 (unavailable)."""

    class Shift(CustomOp, name=f"{ns}::shift"):
        @staticmethod
        def default(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k

        @staticmethod
        def abstract(x: Tensor, k: float = 0.0) -> Tensor:
            return torch.empty_like(x)

        @opclass.provider("cpu", supports=lambda x, k: x.dtype == torch.float32)
        @staticmethod
        def plus1(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 1

        @opclass.provider("cpu", batch_invariant=True)
        @staticmethod
        def plus2(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 2

        @opclass.provider("cpu", available=lambda: False)
        @staticmethod
        def plus3(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 3

        locals().update(extra)

    return Shift


def ran(op: Any, *args: Any, **kwargs: Any) -> set[float]:
    """What each way of calling the op adds: one value if they agree."""
    x = args[0]
    return {float((fn(*args, **kwargs) - x).flatten()[0]) for fn in call_paths(op).values()}


def test_the_first_provider_that_takes_the_call_runs(ns: str) -> None:
    op = make(ns)
    assert ran(op, torch.zeros(2)) == {1.0}  # plus1: float32
    assert ran(op, torch.zeros(2, dtype=torch.float64)) == {2.0}  # plus1 declines, plus2 runs
    assert ran(op, torch.zeros(2), 2.0) == {3.0}
    assert op(torch.empty(2, device="meta")).device.type == "meta"  # the fake kernel: no provider runs
    assert "providers: plus1 (cpu; supports()), plus2 (cpu; batch_invariant), plus3 (cpu; unavailable), default (any device)" in repr(op.record)
    lines = opclass.explain_providers(op, torch.zeros(2, dtype=torch.float64)).splitlines()
    assert lines[1:] == [
        "  plus1 (cpu): supports() returned False",
        "  plus2 (cpu): runs",
        "  plus3 (cpu): not available: available() returned False",
        "  default (any device): an earlier provider runs",
    ]


def test_orders_in_code_for_a_block_and_modes(ns: str) -> None:
    op = make(ns)
    x = torch.zeros(2)
    opclass.set_provider_order(op, ["plus2", "default"])
    try:
        assert ran(op, x) == {2.0}
        with opclass.use_providers({op: ["default"]}):
            assert ran(op, x) == {0.0}
            with opclass.use_providers({op: ["plus1"]}):
                assert ran(op, x) == {1.0}
            assert ran(op, x) == {0.0}
        assert ran(op, x) == {2.0}
    finally:
        opclass.set_provider_order(op, None)
    assert ran(op, x) == {1.0}
    with opclass.use_providers(batch_invariant=True):
        assert ran(op, x) == {2.0}  # plus2 is the only batch-invariant one
    opclass.set_provider_mode(batch_invariant=True)
    try:
        assert ran(op, x) == {2.0}
    finally:
        opclass.set_provider_mode()
    assert ran(op, x) == {1.0}


def test_a_block_is_this_threads_only(ns: str) -> None:
    op = make(ns)
    x = torch.zeros(2)
    inside, outside = threading.Event(), threading.Event()
    seen: list[set[float]] = []

    def other() -> None:
        with opclass.use_providers({op: ["default"]}):
            inside.set()
            outside.wait(5)
            seen.append(ran(op, x))

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(5)
    try:
        assert ran(op, x) == {1.0}  # this thread: the global order, while the other's block is open
    finally:
        outside.set()
        thread.join(5)
    assert seen == [{0.0}]


def test_each_block_gets_its_own_choice_when_blocks_come_and_go(ns: str) -> None:
    """A block's choice was cached by the id of its State: a later block whose State got the freed
    one's address ran the earlier block's provider (89 of 200 alternating blocks here)."""
    ran: list[str] = []

    class Twice(CustomOp, name=f"{ns}::twice"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            ran.append("default")
            return x * 2

        @opclass.provider("cpu")
        @staticmethod
        def other(x: Tensor) -> Tensor:
            ran.append("other")
            return x + x

    x = torch.ones(2)
    for i in range(200):
        name = ("default", "other")[i % 2]
        for fn in (Twice, Twice.op):
            with opclass.use_providers({Twice: [name]}):
                fn(x)
            assert ran[-1] == name, (i, fn, ran[-1])


def test_no_provider_names_the_op_the_call_and_each_reason(ns: str) -> None:
    op = make(ns)
    with opclass.use_providers({op: ["plus1"]}):
        for fn in call_paths(op).values():
            with pytest.raises(RuntimeError) as e:
                fn(torch.zeros(3, dtype=torch.float64), 2.0)
            assert str(e.value).startswith(
                f"{ns}::shift: no provider runs this call (x: Tensor(float64, [3], cpu), k: 2.0): plus1: supports() returned False; "
                "plus2: not in the order in force; plus3: not in the order in force; default: not in the order in force. "
                "Add a provider that accepts it, or let one that does run"
            ), str(e.value)


def test_a_provider_that_raises_raises(ns: str) -> None:
    def broken(x: Tensor, k: float = 0.0) -> Tensor:
        raise ValueError("kernel bug")

    op = make(ns, broken=opclass.provider("cpu")(staticmethod(broken)))
    with opclass.use_providers({op: ["broken", "default"]}):
        for fn in call_paths(op).values():
            with pytest.raises(ValueError, match="kernel bug"):
                fn(torch.zeros(2))


def test_grad_vmap_fake_compile_and_export(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider("cpu")
        @staticmethod
        def twice(x: Tensor) -> Tensor:
            return x + x

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

    x = torch.randn(3, requires_grad=True)
    Scale(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    torch.testing.assert_close(torch.vmap(Scale)(torch.ones(4, 3)), torch.full((4, 3), 2.0))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert Scale(torch.empty(5)).shape == (5,)
    compiled = torch.compile(lambda t: Scale(t) + 1, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    # Opaque in the graph: the provider is chosen at run time, so a later order change applies.
    with opclass.use_providers({Scale: ["default"]}):
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 3.0))
    class M(torch.nn.Module):
        def forward(self, t: Tensor) -> Tensor:
            return Scale(t)

    ep = torch.export.export(M(), (torch.ones(2),))
    assert sum(n.target == Scale.op for n in ep.graph.nodes) == 1
    torch.testing.assert_close(ep.module()(torch.ones(2)), torch.full((2,), 2.0))


def test_compiled_graph_runs_the_provider_the_order_gives_at_run_time(ns: str) -> None:
    op = make(ns)
    compiled = torch.compile(lambda t: op(t), backend="aot_eager", fullgraph=True)
    x = torch.zeros(2)
    assert float(compiled(x)[0]) == 1.0
    with opclass.use_providers({op: ["plus2"]}):
        assert float(compiled(x)[0]) == 2.0
    opclass.set_provider_order(op, ["default"])
    try:
        assert float(compiled(x)[0]) == 0.0
    finally:
        opclass.set_provider_order(op, None)


def test_a_provider_added_from_another_module_is_listed_and_removable(ns: str) -> None:
    op = make(ns)
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _vendor_provider

        _vendor_provider.register(op)
    finally:
        sys.path.remove(str(Path(__file__).parent))
    assert "vendor" in opclass.explain_providers(op).splitlines()[4]
    with opclass.use_providers({op: ["vendor"]}):
        assert ran(op, torch.zeros(2)) == {10.0}
    # A redefinition of the class keeps it (checked against the new definition).
    op = make(ns)
    assert "vendor" in opclass.explain_providers(op)
    opclass.remove_provider(op, "vendor")
    assert "vendor" not in opclass.explain_providers(op)
    with pytest.raises(ValueError, match="has no provider 'vendor' added"):
        opclass.remove_provider(op, "vendor")


def test_an_added_provider_is_checked_as_a_kernel(ns: str) -> None:
    op = make(ns)

    def wrong(x, scale):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(OpDefinitionError) as e:
        opclass.add_provider(op, "wrong", wrong, "cpu")
    assert str(e.value) == "Shift.wrong(x, scale): its parameters (x, scale) do not match the op's (x, k); write wrong(x, k=0.0), or keep its names and make them positional-only: (x, scale, /)"
    assert "wrong" not in opclass.explain_providers(op)  # nothing added, the op as it was
    assert ran(op, torch.zeros(2)) == {1.0}


@pytest.mark.parametrize(
    ("decorated", "problem"),
    [
        ("@opclass.provider('cpu', supports=lambda: True)", "provider 'bad': supports() cannot take the op's arguments (x)"),
        ("@opclass.provider('cpu', supports=3)", "provider 'bad': supports=3 is not callable"),
        ("@opclass.provider('gpu')", "provider 'bad': 'gpu' is not a device type a kernel runs on (those are cpu, cuda, mps"),
    ],
)
def test_provider_definition_mistakes(ns: str, decorated: str, problem: str) -> None:
    source = f"class Bad(CustomOp, name='{ns}::bad'):\n    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x\n    {decorated}\n    @staticmethod\n    def bad(x: Tensor) -> Tensor:\n        return x\n"
    with pytest.raises(OpDefinitionError) as e:
        exec(source, {"CustomOp": CustomOp, "Tensor": Tensor, "opclass": opclass, "torch": torch})
    assert problem in str(e.value), str(e.value)


def clean(ns: str, **extra: Any) -> Any:
    """An op whose providers agree with its reference (on float32 and float64 samples)."""

    class Clean(CustomOp, name=f"{ns}::clean"):
        @staticmethod
        def default(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k

        @opclass.provider("cpu", batch_invariant=True)
        @staticmethod
        def fast(x: Tensor, k: float = 0.0) -> Tensor:
            return k + x

        @staticmethod
        def samples() -> list[Any]:
            return [(torch.randn(4, 3),), (torch.randn(2, 3, dtype=torch.float64),)]

        locals().update(extra)

    return Clean


def check(op: Any) -> None:
    opclass.testing.check_op(op, opcheck=False, fast_path=False, gradcheck=False)


def test_check_op_passes_providers_that_agree(ns: str) -> None:
    check(clean(ns))


def test_check_op_catches_a_provider_that_disagrees(ns: str) -> None:
    op = clean(ns)
    opclass.add_provider(op, "off", lambda x, k=0.0: x + k + 1e-3, "cpu")
    with pytest.raises(AssertionError, match=r"sample 0: providers failed: .*\(Clean.off\) disagrees with .*\(Clean.default\)"):
        check(op)
    opclass.remove_provider(op, "off")
    opclass.add_provider(op, "off", lambda x, k=0.0: x + k + 1e-3, "cpu", atol=1e-2, rtol=0.0)  # its own tolerance
    check(op)


def test_check_op_catches_a_predicate_that_accepts_what_its_kernel_cannot_run(ns: str) -> None:
    def float32_only(x: Tensor, k: float = 0.0) -> Tensor:
        assert x.dtype == torch.float32, "float32 only"
        return x + k

    op = clean(ns)
    opclass.add_provider(op, "greedy", float32_only, "cpu")
    with pytest.raises(AssertionError, match=r"sample 1: providers failed: .*\(Clean.greedy\) accepts the sample .* but raises AssertionError: float32 only"):
        check(op)
    opclass.remove_provider(op, "greedy")
    opclass.add_provider(op, "greedy", float32_only, "cpu", supports=lambda x, k: x.dtype == torch.float32)
    check(op)  # declined where it cannot run, and the op serves the sample otherwise


def test_check_op_catches_a_false_batch_invariant_claim(ns: str) -> None:
    def mixes_rows(x: Tensor, k: float = 0.0) -> Tensor:
        return x + k + x.sum(0, keepdim=True) * 1e-7

    op = clean(ns)
    opclass.add_provider(op, "mixer", mixes_rows, "cpu", batch_invariant=True, atol=1e-3, rtol=1e-3)
    with pytest.raises(AssertionError, match=r"\(Clean.mixer\) is declared batch_invariant, but row (\d) of a batch of 4 differs from row \1 computed alone"):
        check(op)
    opclass.remove_provider(op, "mixer")
    opclass.add_provider(op, "mixer", mixes_rows, "cpu", atol=1e-3, rtol=1e-3)  # no claim: no check
    check(op)


def test_debug_mode_compares_the_chosen_provider_with_the_reference(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "1")
    op = make(ns)
    with pytest.raises(RuntimeError, match=r"\(Shift.plus1\) disagrees with .*\(Shift.default\) \(debug mode compares them on every call\)"):
        op(torch.zeros(2))


def test_the_profiler_shows_which_provider_ran(ns: str) -> None:
    op = make(ns)
    with torch.profiler.profile() as prof:
        op(torch.zeros(2))
    names = {e.name for e in prof.events()}
    assert f"{ns}::shift [plus1]" in names, sorted(names)[:20]


def test_the_environment_sets_an_order_and_a_mode(tmp_path: Path) -> None:
    script = tmp_path / "env_order.py"
    script.write_text(
        "import torch, opclass\nfrom torch import Tensor\n"
        "class Op(opclass.CustomOp, name='t_env::op'):\n"
        "    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x.clone()\n"
        "    @opclass.provider('cpu')\n    @staticmethod\n    def one(x: Tensor) -> Tensor:\n        return x + 1\n"
        "    @opclass.provider('cpu', deterministic=True)\n    @staticmethod\n    def two(x: Tensor) -> Tensor:\n        return x + 2\n"
        "print(float(Op(torch.zeros(1))[0]), float(Op.op(torch.zeros(1))[0]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(**extra: str) -> str:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env={**env, **extra}, cwd=tmp_path)
        return (done.stdout + done.stderr).strip().splitlines()[-1]

    assert run() == "1.0 1.0"
    assert run(OPCLASS_PROVIDERS="t_env::op=default,one") == "0.0 0.0"
    assert run(OPCLASS_PROVIDER_MODE="deterministic") == "2.0 2.0"
    # Validated when the op is called, not when it is defined (a plugin may add the provider later).
    assert "t_env::op: OPCLASS_PROVIDERS names provider 'defualt' (did you mean 'default'?), which it does not have (it has one, two, default)" in run(OPCLASS_PROVIDERS="t_env::op=defualt")


def test_eager_autograd_differentiates_through_the_provider_that_runs(ns: str) -> None:
    class Square(CustomOp, name=f"{ns}::square"):
        eager_autograd = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * x

        @opclass.provider("cpu")
        @staticmethod
        def power(x: Tensor) -> Tensor:
            return x.pow(2)

    for order in (None, ["default"]):
        x = torch.randn(3, requires_grad=True)
        with opclass.use_providers({Square: order} if order else {}):
            y = Square(x)
            y.sum().backward()
        assert y.grad_fn is not None and y.grad_fn.name() == ("PowBackward0" if order is None else "MulBackward0")
        torch.testing.assert_close(x.grad, 2 * x.detach())


def _graph_targets(fn: Any, *args: Any) -> list[str]:
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        from torch._functorch.aot_autograd import aot_module_simplified

        def inner(graph: torch.fx.GraphModule, inputs: Any) -> Any:
            seen.extend(str(n.target) for n in graph.graph.nodes if n.op == "call_function")
            return graph.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=inner)

    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return seen


def test_a_traceable_op_traces_the_provider_chosen_at_trace_time(ns: str) -> None:
    class Triple(CustomOp, name=f"{ns}::triple"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + x + x

        @opclass.provider("cpu", supports=lambda x: x.dim() == 1)
        @staticmethod
        def mul(x: Tensor) -> Tensor:
            return torch.mul(x, 3)

    assert "aten.mul.Tensor" in _graph_targets(lambda t: Triple(t), torch.ones(4))  # mul: 1-d
    assert "aten.add.Tensor" in _graph_targets(lambda t: Triple(t), torch.ones(2, 2))  # mul declines 2-d
    with opclass.use_providers({Triple: ["default"]}):
        assert "aten.mul.Tensor" not in _graph_targets(lambda t: Triple(t) - 1.0, torch.ones(4))
    torch.testing.assert_close(Triple(torch.ones(4)), torch.full((4,), 3.0))


@pytest.mark.slow
def test_inductor_runs_an_op_with_providers(ns: str) -> None:
    op = make(ns)
    compiled = torch.compile(lambda t: op(t) * 2, fullgraph=True)
    assert float(compiled(torch.zeros(2))[0]) == 2.0  # plus1, then * 2
    with opclass.use_providers({op: ["default"]}):
        assert float(compiled(torch.zeros(2))[0]) == 0.0  # chosen at run time: the op is opaque


def test_redefinition_refuses_an_added_provider_that_no_longer_fits(ns: str) -> None:
    op = make(ns)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 10, "cpu")

    with pytest.raises(OpDefinitionError) as e:

        class Shift(CustomOp, name=f"{ns}::shift"):
            @staticmethod
            def default(x: Tensor, k: float = 0.0, *, scale: float = 1.0) -> Tensor:
                return x + k

    assert "Shift.vendor" in str(e.value) and "its parameters (x, k) do not match the op's (x, k, scale)" in str(e.value)
    assert ran(op, torch.zeros(2)) == {1.0}  # the op as it was, the provider with it
    opclass.remove_provider(op, "vendor")


# --------------------------------------------------------------------------- the example

EXAMPLE = ROOT / "examples" / "providers.py"


def _example() -> Any:
    """examples/providers.py, imported once per session (as tests/test_examples.py does)."""
    import importlib.util

    name = "opclass_examples_providers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def runs(op: Any, *args: Any) -> str:
    """The provider the dispatcher runs for ``op(*args)`` (the profiler names it), after checking
    that every way of calling the op agrees with the reference."""
    expected = op.default(*args)
    for fn in call_paths(op).values():
        torch.testing.assert_close(fn(*args), expected, atol=1e-5, rtol=1e-5)
    with torch.profiler.profile() as prof:
        op.op(*args)
    found = [e.name.rpartition("[")[2].rstrip("]") for e in prof.events() if e.name.startswith(f"{op.qualname} [")]
    assert len(found) == 1, found
    return found[0]


def test_the_example_chooses_as_declared_under_every_override() -> None:
    example = _example()
    op = example.RMSNorm
    x, w = torch.randn(4, 16), torch.randn(16)
    fast = "cpp" if example._cpp_available() else "numpy"
    assert runs(op, x, w) == fast
    assert runs(op, x.double(), w.double()) == "numpy"  # cpp: float32 only
    assert runs(op, torch.randn(16, 4).t(), w) == "numpy"  # cpp: contiguous only
    assert runs(op, x.half(), w.half()) == "default"  # neither takes float16
    with opclass.use_providers({op: ["default"]}):
        assert runs(op, x, w) == "default"
    opclass.set_provider_order(op, ["numpy", "default"])
    try:
        assert runs(op, x, w) == "numpy"
    finally:
        opclass.set_provider_order(op, None)
    with opclass.use_providers(batch_invariant=True):
        with pytest.raises(RuntimeError, match="no provider runs this call"):
            op(x.half(), w.half())  # default is not batch_invariant, and no provider takes float16
        assert runs(op, x, w) == fast
    with opclass.use_providers(deterministic=True), pytest.raises(RuntimeError, match="cpp: not deterministic; numpy: not deterministic; default: not deterministic"):
        op.op(x, w)


def test_the_example_through_autograd_vmap_fake_compile_and_export() -> None:
    op = _example().RMSNorm
    x, w = torch.randn(3, 8, dtype=torch.double, requires_grad=True), torch.randn(8, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, w))
    batch, wf = torch.randn(2, 3, 8), w.detach().float()
    torch.testing.assert_close(torch.vmap(op, in_dims=(0, None))(batch, wf), torch.stack([op.default(b, wf) for b in batch]), atol=1e-5, rtol=1e-5)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert op(torch.empty(2, 8), torch.empty(8)).shape == (2, 8)
    t, v = torch.randn(4, 16), torch.randn(16)
    compiled = torch.compile(lambda a, b: op(a, b) + 1, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(t, v), op.default(t, v) + 1, atol=1e-5, rtol=1e-5)

    class Norm(torch.nn.Module):
        def forward(self, a: Tensor, b: Tensor) -> Tensor:
            return op(a, b)

    ep = torch.export.export(Norm(), (t, v))
    assert sum(n.target == op.op for n in ep.graph.nodes) == 1
    decomposed = ep.run_decompositions(opclass.decompositions(op))
    assert not any(n.target == op.op for n in decomposed.graph.nodes)  # into the reference
    torch.testing.assert_close(decomposed.module()(t, v), op.default(t, v))


@pytest.mark.slow
def test_the_example_under_inductor_and_the_environment(tmp_path: Path) -> None:
    op = _example().RMSNorm
    t, v = torch.randn(4, 16), torch.randn(16)
    compiled = torch.compile(lambda a, b: op(a, b) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(t, v), op.default(t, v) * 2, atol=1e-5, rtol=1e-5)
    script = tmp_path / "which.py"
    script.write_text(
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('example', {str(EXAMPLE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "x, w = torch.randn(4, 16), torch.randn(16)\n"
        "with torch.profiler.profile() as p:\n    m.RMSNorm.op(x, w)\n"
        "print([e.name for e in p.events() if e.name.startswith('opclass_examples::rms_norm [')])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPCLASS_PROVIDERS": "opclass_examples::rms_norm=numpy,default"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip().splitlines()[-1] == "['opclass_examples::rms_norm [numpy]']"


def test_the_reference_switch_runs_every_ops_own_kernels(ns: str) -> None:
    op = make(ns)  # plus1 would run a float32 call; default is the op's own kernel

    class OnlyProviders(CustomOp, name=f"{ns}::only"):
        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            return x + 1

    x = torch.zeros(2)
    assert ran(op, x) == {1.0} and opclass.which_provider(op, x) == "plus1"
    with opclass.use_providers({op: ["plus2"]}, reference=True):  # whatever the order says
        assert ran(op, x) == {0.0} and opclass.which_provider(op, x) == "default"
        assert opclass.which_provider(OnlyProviders, x) is None
        with pytest.raises(RuntimeError, match=r"no provider runs this call \(x: Tensor\(float32, \[2\], cpu\)\): fast: a provider, and the mode is reference"):
            OnlyProviders(x)
    assert ran(op, x) == {1.0}
    opclass.set_provider_mode(reference=True)
    try:
        assert ran(op, x) == {0.0}
    finally:
        opclass.set_provider_mode()
    assert ran(op, x) == {1.0}


def test_the_reference_switch_from_the_environment(tmp_path: Path) -> None:
    script = tmp_path / "reference.py"
    script.write_text(
        "import torch, opclass\nfrom torch import Tensor\n"
        "class Op(opclass.CustomOp, name='t_ref::op'):\n"
        "    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x.clone()\n"
        "    @opclass.provider('cpu')\n    @staticmethod\n    def one(x: Tensor) -> Tensor:\n        return x + 1\n"
        "print(float(Op(torch.zeros(1))[0]), float(Op.op(torch.zeros(1))[0]), opclass.which_provider(Op, torch.zeros(1)))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "OPCLASS_PROVIDER_MODE": "reference"}, cwd=tmp_path)
    assert done.stdout.strip() == "0.0 0.0 default", done.stderr


def test_tolerances_per_dtype(ns: str) -> None:
    def rounded(x: Tensor, k: float = 0.0) -> Tensor:  # a few float16 ulps off, exact in float32
        return x + k + (4e-3 if x.dtype == torch.float16 else 0.0)

    op = clean(ns)
    opclass.add_provider(op, "rounded", rounded, "cpu", atol={torch.float16: 1e-2}, rtol={torch.float16: 1e-2})
    samples = [(torch.ones(4, 3), 0.5), (torch.ones(4, 3, dtype=torch.float16), 0.5)]
    opclass.testing.check_op(op, samples, opcheck=False)
    opclass.remove_provider(op, "rounded")
    opclass.add_provider(op, "rounded", lambda x, k=0.0: x + k + 1e-3, "cpu", atol={torch.float16: 1e-2})  # float32 keeps the defaults
    with pytest.raises(AssertionError, match=r"\(Clean.rounded\) disagrees"):
        opclass.testing.check_op(op, samples, opcheck=False)
    opclass.remove_provider(op, "rounded")
    with pytest.raises(OpDefinitionError, match=r"atol=\{'fp16': 0.01\} is no tolerance; write atol=1e-5, or one per dtype"):
        opclass.add_provider(op, "bad", rounded, "cpu", atol={"fp16": 1e-2})  # type: ignore[dict-item]
