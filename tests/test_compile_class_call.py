"""torch.compile reads a call of an op class as a call of its OpOverload (opclass/_dynamo_call.py).

The graph holds the op's node and nothing else, whatever the arguments look like, and dynamo
never traces the class's ``__new__``; abstract bases, removed and redefined classes behave under
compile as they do eagerly; and none of it imports ``torch._dynamo`` before the user does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, NoReturn

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp

ROOT = Path(__file__).resolve().parent.parent


def _recording_backend() -> tuple[Callable[..., Any], list[torch.fx.GraphModule]]:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend, graphs


def _call_targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _axpy(ns: str) -> Any:
    class Axpy(CustomOp, name=f"{ns}::axpy"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
            return a * x + y

        @staticmethod
        def abstract(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
            return torch.empty_like(x)

    return Axpy


def _untraceable_new(cls: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("dynamo traced the op class's __new__")


@pytest.mark.parametrize(
    ("call", "expected_args", "expected_kwargs"),
    [
        ("positional", 3, set()),
        ("keyword", 1, {"y", "a"}),
        ("default", 2, set()),
    ],
)
def test_graph_is_one_op_node(ns: str, call: str, expected_args: int, expected_kwargs: set[str]) -> None:
    Axpy = _axpy(ns)
    fn = {
        "positional": lambda x, y: Axpy(x, y, 3.0),
        "keyword": lambda x, y: Axpy(x, y=y, a=3.0),
        "default": lambda x, y: Axpy(x, y),
    }[call]
    backend, graphs = _recording_backend()
    x, y = torch.randn(4), torch.randn(4)
    out = torch.compile(fn, backend=backend, fullgraph=True)(x, y)
    torch.testing.assert_close(out, fn(x, y))
    (gm,) = graphs
    assert _call_targets(gm) == [Axpy.op]
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    # As written: omitted defaults stay omitted, as in a call of torch.ops.ns.axpy.default.
    assert len(node.args) == expected_args
    assert set(node.kwargs) == expected_kwargs


def test_graph_equals_the_overload_call(ns: str) -> None:
    Axpy = _axpy(ns)
    overload = Axpy.op  # bound outside: torch 2.11's dynamo cannot call the metaclass property
    graphs_by_call = []
    for fn in (lambda x, y: Axpy(x, y, a=3.0).sin(), lambda x, y: overload(x, y, a=3.0).sin()):
        backend, graphs = _recording_backend()
        torch.compile(fn, backend=backend, fullgraph=True)(torch.randn(3), torch.randn(3))
        graphs_by_call.append(graphs[0].code)
    assert graphs_by_call[0] == graphs_by_call[1]


def test_dynamo_never_traces_new(ns: str) -> None:
    # The class call may run a __new__ dynamo cannot trace (the pure-Python guard's generated one):
    # compiling must not depend on it.
    Axpy = _axpy(ns)
    Axpy.__new__ = _untraceable_new
    backend, graphs = _recording_backend()
    x, y = torch.randn(4), torch.randn(4)
    out = torch.compile(lambda x, y: Axpy(x, y, a=3.0) + 1, backend=backend, fullgraph=True)(x, y)
    torch.testing.assert_close(out, 3.0 * x + y + 1)
    assert _call_targets(graphs[0]).count(Axpy.op) == 1


def test_class_reached_through_a_container_or_module_attribute(ns: str) -> None:
    Axpy = _axpy(ns)
    Axpy.__new__ = _untraceable_new
    ops = {"axpy": Axpy}
    holder = torch.nn.Module()
    holder.kind = Axpy  # type: ignore[assignment]
    fn = torch.compile(lambda x: ops["axpy"](x, x) + holder.kind(x, x, a=1.0), backend="aot_eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), 2 * x + x + x + x)


def test_abstract_base_raises_under_compile(ns: str) -> None:
    class Base(CustomOp, namespace=ns):
        pass

    x = torch.randn(2)
    with pytest.raises(TypeError) as eager:
        Base(x)
    with pytest.raises(TypeError) as compiled:
        torch.compile(lambda t: Base(t), backend="aot_eager")(x)
    assert str(compiled.value) == str(eager.value)
    assert "abstract op base" in str(compiled.value)


def test_removed_class_raises_and_redefined_class_calls_the_new_op(ns: str) -> None:
    Axpy = _axpy(ns)
    fn = torch.compile(lambda x, y: Axpy(x, y), backend="aot_eager")
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(fn(x, y), 2 * x + y)

    with pytest.warns(UserWarning, match="replaces the op"):

        class Axpy2(CustomOp, name=f"{ns}::axpy"):  # the old class now calls this op
            @staticmethod
            def cpu(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
                return a * x - y

            @staticmethod
            def abstract(x: Tensor, y: Tensor, a: float = 2.0) -> Tensor:
                return torch.empty_like(x)

    torch.testing.assert_close(Axpy(x, y), 2 * x - y)
    torch.testing.assert_close(fn(x, y), 2 * x - y)

    opclass.remove(Axpy2)
    with pytest.raises(RuntimeError, match="was removed") as eager:
        Axpy(x, y)
    with pytest.raises(RuntimeError, match="was removed") as compiled:
        fn(x, y)
    assert str(compiled.value) == str(eager.value)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
def test_no_dynamo_import_and_classes_defined_before_it_are_read_as_ops() -> None:
    code = """
        import sys, torch
        from torch import Tensor
        import opclass
        before = "torch._dynamo" in sys.modules
        class Op(opclass.CustomOp, name="dyn_lazy::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)
        defined = "torch._dynamo" in sys.modules
        def untraceable_new(cls, *args, **kwargs):
            raise AssertionError("traced __new__")
        Op.__new__ = untraceable_new
        out = torch.compile(lambda x: Op(x) * 2, backend="aot_eager", fullgraph=True)(torch.zeros(2))
        print(before, defined, out.tolist())
        """
    assert _run(code) == "False False [2.0, 2.0]"


@pytest.mark.slow
def test_classes_defined_after_dynamo_is_imported_are_read_as_ops() -> None:
    code = """
        import torch, torch._dynamo
        from torch import Tensor
        import opclass
        class Op(opclass.CustomOp, name="dyn_after::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)
        def untraceable_new(cls, *args, **kwargs):
            raise AssertionError("traced __new__")
        Op.__new__ = untraceable_new
        print(torch.compile(lambda x: Op(x) * 2, backend="aot_eager", fullgraph=True)(torch.zeros(2)).tolist())
        """
    assert _run(code) == "[2.0, 2.0]"
