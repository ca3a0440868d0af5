"""Ops with providers under torch.compile: opaque by default; ``traceable = True`` lowers the
provider chosen at trace time into the graph, and a class call is guarded on the provider state
it was chosen under (orders, mode, a ``use_providers`` block around the compiled call), so a
change recompiles rather than leaving a stale graph; ``traceable = "reference"`` lowers the op's
own kernel whatever the order (and in an exported program's decomposition); the compile cache never serves a graph traced
from another body.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp


def _shift(ns: str, lowering: Any = True) -> Any:
    """``default`` adds 0, ``plus1`` (first) 1, ``plus2`` 2."""

    class Shift(CustomOp, name=f"{ns}::shift"):
        traceable = lowering

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 0.0

        @opclass.provider("cpu")
        @staticmethod
        def plus1(x: Tensor) -> Tensor:
            return x + 1.0

        @opclass.provider("cpu")
        @staticmethod
        def plus2(x: Tensor) -> Tensor:
            return x + 2.0

    return Shift


class _Graphs:
    """A backend through AOTAutograd that keeps each forward graph's code: one per compile."""

    def __init__(self) -> None:
        self.codes: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Any:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch._aot_autograd.utils import make_boxed_func

        def keep(graph: torch.fx.GraphModule, inputs: list[Tensor]) -> Callable[..., Any]:
            self.codes.append(graph.code)
            return make_boxed_func(graph.forward)

        return aot_autograd(fw_compiler=keep)(gm, example_inputs)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from nothing, no stale-graph warning goes unnoticed, and the mode a
    failed test set goes."""
    torch._dynamo.reset()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", "(?s).*is traceable and was traced by torch.compile", UserWarning)
            yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            opclass.set_provider_mode()
        torch._dynamo.reset()


def _added(compiled: Callable[[Tensor], Tensor]) -> float:
    """What the compiled ``op(x) * 1`` added to zeros."""
    return float(compiled(torch.zeros(3))[0])


# --------------------------------------------------------------------------- lowered: guarded on the provider state


def test_an_order_change_recompiles_and_the_new_provider_runs(ns: str) -> None:
    op = _shift(ns)
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 1.0 and len(graphs.codes) == 1
    assert "1.0" in graphs.codes[0] and f"{ns}.shift" not in graphs.codes[0], graphs.codes[0]  # lowered: plus1's body
    assert _added(compiled) == 1.0 and len(graphs.codes) == 1  # the guard holds: no recompile
    opclass.set_provider_order(op, ["plus2", "default"])  # no warning: the class call is guarded
    assert _added(compiled) == 2.0 and len(graphs.codes) == 2
    assert "2.0" in graphs.codes[1] and f"{ns}.shift" not in graphs.codes[1], graphs.codes[1]
    opclass.set_provider_order(op, None)
    assert _added(compiled) == 1.0 and len(graphs.codes) == 2  # the first graph again, kept by dynamo


def test_a_mode_change_recompiles(ns: str) -> None:
    op = _shift(ns)
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 1.0
    opclass.set_provider_mode(reference=True)
    assert _added(compiled) == 0.0 and len(graphs.codes) == 2  # the op's own default
    opclass.set_provider_mode()
    assert _added(compiled) == 1.0 and len(graphs.codes) == 2


def test_a_use_providers_block_around_the_compiled_call_recompiles_for_it_and_back(ns: str) -> None:
    op = _shift(ns)
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 1.0
    with opclass.use_providers({op: ["plus2"]}):
        assert _added(compiled) == 2.0 and len(graphs.codes) == 2
    assert _added(compiled) == 1.0
    with opclass.use_providers(reference=True):  # a mode block concerns every op with providers
        assert _added(compiled) == 0.0 and len(graphs.codes) == 3
    with opclass.use_providers({op: ["plus2"]}):
        assert _added(compiled) == 2.0
    assert len(graphs.codes) == 3  # each state compiled once


def test_add_provider_recompiles(ns: str) -> None:
    op = _shift(ns)
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 1.0
    opclass.add_provider(op, "plus5", lambda x: x + 5.0, "cpu")  # the same order names it not
    opclass.set_provider_order(op, ["plus5"])
    assert _added(compiled) == 5.0 and len(graphs.codes) == 2
    opclass.set_provider_order(op, None)
    opclass.remove_provider(op, "plus5")


def test_an_opaque_op_gets_no_guard(ns: str) -> None:
    op = _shift(ns, lowering=False)
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 1.0
    assert f"{ns}.shift" in graphs.codes[0]  # one node, chosen at run time
    with opclass.use_providers({op: ["plus2"]}):
        assert _added(compiled) == 2.0
    assert len(graphs.codes) == 1


@pytest.mark.slow
def test_inductor_an_order_change_recompiles_and_the_new_provider_runs(ns: str) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    op = _shift(ns)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda x: op(x) * 1, backend=counter, fullgraph=True)
    assert _added(compiled) == 1.0
    opclass.set_provider_order(op, ["plus2"])
    assert _added(compiled) == 2.0 and counter.frame_count == 2
    opclass.set_provider_order(op, None)
    assert _added(compiled) == 1.0 and counter.frame_count == 2


# --------------------------------------------------------------------------- traceable = "reference"


def test_reference_lowers_the_own_kernel_whatever_the_order(ns: str) -> None:
    op = _shift(ns, lowering="reference")
    x = torch.zeros(3)
    assert float(op(x)[0]) == 1.0  # eager: the providers, as usual
    graphs = _Graphs()
    compiled = torch.compile(lambda x: op(x) * 1, backend=graphs, fullgraph=True)
    assert _added(compiled) == 0.0
    assert f"{ns}.shift" not in graphs.codes[0] and "1.0" not in graphs.codes[0], graphs.codes[0]
    opclass.set_provider_order(op, ["plus2", "default"])  # the graph does not depend on it: no warning
    assert _added(compiled) == 0.0 and len(graphs.codes) == 1
    assert float(op(x)[0]) == 2.0
    opclass.set_provider_order(op, None)


def test_reference_is_what_an_exported_program_decomposes_into(ns: str) -> None:
    op = _shift(ns, lowering="reference")

    class Model(torch.nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return op(x) * 2

    ep = torch.export.export(Model(), (torch.zeros(3),))
    assert [n.target for n in ep.graph.nodes if n.op == "call_function"] == [op.op, torch.ops.aten.mul.Tensor]  # the op, as for True
    decomposed = ep.run_decompositions({})  # a traceable = True op stays one node here
    targets = [n.target for n in decomposed.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor], targets  # default's body
    assert decomposed.module()(torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    assert ep.module()(torch.zeros(3)).tolist() == [2.0, 2.0, 2.0]  # the op, choosing: plus1


@pytest.mark.slow
def test_inductor_reference_generates_no_call_of_the_op(ns: str) -> None:
    from torch._inductor.utils import run_and_get_code

    op = _shift(ns, lowering="reference")
    x = torch.zeros(3)
    compiled = torch.compile(lambda x: op(x).relu() * 3, fullgraph=True)
    out, code = run_and_get_code(compiled, x)
    assert out.tolist() == [0.0, 0.0, 0.0]  # default's x + 0, fused with what follows
    assert code and not any(ns in c for c in code), code
    assert op(x).tolist() == [1.0, 1.0, 1.0]  # eager still runs plus1


def test_reference_needs_an_own_kernel(ns: str) -> None:
    with pytest.raises(opclass.OpDefinitionError) as info:

        class OnlyProviders(CustomOp, name=f"{ns}::only"):
            traceable = "reference"

            @opclass.provider("cpu")
            @staticmethod
            def fast(x: Tensor) -> Tensor:
                return x + 1.0

    assert str(info.value).startswith(
        "OnlyProviders.traceable: traces the op's own kernel under torch.compile, but the class has only providers; "
        "define OnlyProviders.default (the op in torch ops), or write traceable = True"
    ), str(info.value)


# --------------------------------------------------------------------------- the compile cache


def _cached_v1(ns: str) -> Any:
    class Cached(CustomOp, name=f"{ns}::cached"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 0.0

        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            return x + 1.0

    return Cached


def _cached_v2(ns: str) -> Any:
    class Cached(CustomOp, name=f"{ns}::cached"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 0.0

        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            return x + 10.0

    return Cached


@pytest.mark.slow
def test_another_provider_body_misses_the_compile_cache(ns: str) -> None:
    import torch._inductor.utils as inductor_utils
    from torch._dynamo.utils import counters

    fresh_cache = getattr(inductor_utils, "fresh_cache", None) or inductor_utils.fresh_inductor_cache  # torch < 2.8: the older name

    def compile_and_run(define: Callable[[str], Any]) -> tuple[float, dict[str, int]]:
        op = define(ns)
        torch._dynamo.reset()
        counters.clear()
        value = _added(torch.compile(lambda x: op(x) * 1, fullgraph=True))
        opclass.remove(op)  # the next class statement defines the op anew
        return value, {**counters["aot_autograd"], **counters["inductor"]}

    with fresh_cache(), torch._inductor.config.patch(fx_graph_cache=True), torch._functorch.config.patch(enable_autograd_cache=True):
        value, seen = compile_and_run(_cached_v1)
        assert value == 1.0 and seen.get("autograd_cache_miss") == 1, seen
        value, seen = compile_and_run(_cached_v1)  # the same body: the cache serves it
        assert value == 1.0 and seen.get("autograd_cache_hit") == 1 and not seen.get("autograd_cache_miss"), seen
        value, seen = compile_and_run(_cached_v2)
        assert value == 10.0, "a cached graph of the old provider body ran"
        assert seen.get("autograd_cache_miss") == 1 and not seen.get("autograd_cache_hit"), seen
