"""Config objects as op arguments: a frozen dataclass parameter becomes a torch opaque value type.

Covers: the schema (one argument named by the class's path), eager calls on the fast path (the
generated guard takes exactly the config class) and through the dispatcher, opcheck, compile
(same value reuses the graph, another value recompiles), export, and the definition errors
(mutable dataclass, class inside a function, field types, defaults).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Optional

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp, OpDefinitionError

from _versions import needs_plain_opaque_values
from opclass.callpath.classcall import call_function

pytestmark = needs_plain_opaque_values


@dataclasses.dataclass(frozen=True)
class Cfg:
    bits: int = 8
    scale: float = 0.5
    mode: str = "nearest"
    limits: tuple[int, ...] = (-1, 1)
    note: Optional[str] = None


@dataclasses.dataclass
class MutableCfg:
    bits: int = 8


@dataclasses.dataclass(frozen=True)
class TensorCfg:
    weight: Tensor


def _quant(x: Tensor, cfg: Cfg) -> Tensor:
    return torch.round(x / cfg.scale).clamp(*cfg.limits) * cfg.scale


def make(ns: str) -> Any:
    class Quant(CustomOp, name=f"{ns}::quant"):
        @staticmethod
        def cpu(x: Tensor, cfg: Cfg, *, bias: float = 0.0) -> Tensor:
            return _quant(x, cfg) + bias

        @staticmethod
        def abstract(x: Tensor, cfg: Cfg, *, bias: float = 0.0) -> Tensor:
            return torch.empty_like(x)

    return Quant


def test_schema_and_eager(ns: str) -> None:
    Quant = make(ns)
    assert Quant.schema == f"(Tensor x, {__name__}.Cfg cfg, *, float bias=0.0) -> Tensor"
    assert [str(a.type) for a in Quant.op._schema.arguments] == ["Tensor", "PyObject", "float"]
    x, cfg = torch.randn(8) * 3, Cfg(scale=0.25, limits=(-4, 3))
    torch.testing.assert_close(Quant(x, cfg, bias=1.0), _quant(x, cfg) + 1.0)
    torch.testing.assert_close(Quant(x, cfg), Quant.op(x, cfg))


def test_fast_path_guards_on_the_exact_config_class(ns: str) -> None:
    Quant = make(ns)
    source = inspect.getsource(call_function(Quant))
    assert "type(cfg) is _cfg_cfg" in source
    # Anything else goes to the dispatcher, which hands it to the kernel as is: same error.
    x = torch.randn(3)
    errors = []
    for call in (Quant, Quant.op):
        with pytest.raises(AttributeError) as e:
            call(x, 0.5)
        errors.append(str(e.value))
    assert errors[0] == errors[1] == "'float' object has no attribute 'scale'"


def test_opcheck(ns: str) -> None:
    Quant = make(ns)
    for cfg in (Cfg(), Cfg(bits=4, scale=0.1, mode="up", limits=(-8, 7), note="n")):
        torch.library.opcheck(Quant.op, (torch.randn(2, 3), cfg), {"bias": 0.5})


def _counting_compile(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[int]]:
    count = [0]

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        count[0] += 1
        return gm.forward

    return torch.compile(fn, backend=backend, fullgraph=True), count


def test_compile_recompiles_only_for_another_value(ns: str) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    Quant = make(ns)
    f, count = _counting_compile(lambda x, cfg: Quant(x, cfg) * 2)
    x = torch.randn(5)
    torch.testing.assert_close(f(x, Cfg(scale=0.25)), Quant(x, Cfg(scale=0.25)) * 2)
    f(x, Cfg(scale=0.25))  # a different but equal object
    assert count == [1]
    torch.testing.assert_close(f(x, Cfg(scale=0.5)), Quant(x, Cfg(scale=0.5)) * 2)
    assert count == [2]
    g = torch.compile(lambda x, cfg: Quant(x, cfg) + 1, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(g(x, Cfg(bits=2)), Quant(x, Cfg(bits=2)) + 1)
    torch._dynamo.reset()


def test_export_prints_the_config_into_the_graph(ns: str) -> None:
    Quant = make(ns)
    cfg = Cfg(scale=0.125)

    class M(torch.nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return Quant(x, cfg)

    x = torch.randn(4)
    ep = torch.export.export(M(), (x,))
    calls = [n for n in ep.graph.nodes if n.op == "call_function" and n.target is Quant.op]
    assert len(calls) == 1 and calls[0].args[1] == cfg
    torch.testing.assert_close(ep.module()(x), Quant(x, cfg))


def _define(ns: str, annotation: Any, default: Any = inspect.Parameter.empty) -> None:
    if default is inspect.Parameter.empty:

        def cpu(x: Tensor, cfg: Any) -> Tensor:
            return x.clone()

    else:

        def cpu(x: Tensor, cfg: Any = default) -> Tensor:
            return x.clone()

    cpu.__annotations__["cfg"] = annotation
    type("Bad", (CustomOp,), {"cpu": staticmethod(cpu)}, name=f"{ns}::bad")


@pytest.mark.parametrize(
    "annotation, default, problem, fix",
    [
        (MutableCfg, inspect.Parameter.empty, "config class MutableCfg is a mutable dataclass", "declare it @dataclasses.dataclass(frozen=True)"),
        (TensorCfg, inspect.Parameter.empty, "config class TensorCfg field weight: Tensor cannot be part of a constant", "use int, float, bool, str"),
        (Cfg, Cfg(), "config parameter 'cfg' has a default, which a schema cannot hold", "drop the default; callers pass cfg explicitly"),
    ],
)
def test_definition_errors(ns: str, annotation: Any, default: Any, problem: str, fix: str) -> None:
    with pytest.raises(OpDefinitionError) as e:
        _define(ns, annotation, default)
    assert problem in str(e.value) and fix in str(e.value)


def test_config_class_inside_a_function_is_rejected(ns: str) -> None:
    @dataclasses.dataclass(frozen=True)
    class Local:
        bits: int = 8

    with pytest.raises(OpDefinitionError) as e:
        _define(ns, Local)
    assert "is defined inside a function" in str(e.value) and "define it at module level" in str(e.value)


@dataclasses.dataclass(frozen=True)
class RefusedCfg:
    bits: int = 4


def test_a_refused_class_leaves_torch_as_it_was(ns: str) -> None:
    """A config class is registered with torch (and given its ``__fx_repr__``) when the op is
    installed: a class refused at creation registers nothing."""
    from opclass.core import compat

    with pytest.raises(OpDefinitionError, match="mutates_args names 'nope'"):

        class Refused(CustomOp, name=f"{ns}::refused", mutates_args=("nope",)):
            @staticmethod
            def cpu(x: Tensor, cfg: RefusedCfg) -> Tensor:
                return x.clone()

    assert not compat.is_config_type(RefusedCfg)
    assert not torch._C._is_opaque_type_registered(f"{RefusedCfg.__module__}.{RefusedCfg.__qualname__}")
    assert "__fx_repr__" not in vars(RefusedCfg)

    class Accepted(CustomOp, name=f"{ns}::accepted"):
        @staticmethod
        def cpu(x: Tensor, cfg: RefusedCfg) -> Tensor:
            return x * cfg.bits

    assert compat.is_config_type(RefusedCfg) and "__fx_repr__" in vars(RefusedCfg)
    torch.testing.assert_close(Accepted(torch.ones(1), RefusedCfg()), torch.tensor([4.0]))
    # Removed with its op where torch can take a registration back (2.15), else kept, once.
    opclass.remove(Accepted)
    from torch._library import opaque_object

    assert compat.is_config_type(RefusedCfg) is not hasattr(opaque_object, "unregister_custom_class")
