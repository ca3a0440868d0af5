"""Dispatch styles real libraries use, as hooks: a composite op (``composite``: a
CompositeImplicitAutograd kernel) and an Autograd-only op (``autograd``: a kernel at the Autograd
key and no backend kernel, as torch's quantized_decomposed writes fake_quant_per_channel), each
compared, value for value and error for error, with the same op written with
``torch.library.Library`` + ``impl``, in eager, ``inference_mode``, FakeTensor, a
TorchDispatchMode, export with ``run_decompositions`` and grad."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import opclass
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths


class _Ste(torch.autograd.Function):
    """Rounding with a straight-through gradient, the way fake-quant ops write their Autograd kernel."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, k: float) -> Tensor:
        return torch.round(x * k) / k

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Any:
        return grad, None


def _body(x: Tensor, k: float) -> Tensor:
    if k <= 0:
        raise ValueError("k must be positive")
    return torch.nn.functional.silu(x) * k


def _ste(x: Tensor, k: float) -> Tensor:
    if k <= 0:
        raise ValueError("k must be positive")
    return _Ste.apply(x, k)


STYLES = {"composite": ("CompositeImplicitAutograd", _body), "autograd": ("Autograd", _ste)}


def _ops(ns: str, style: str) -> dict[str, Callable[..., Any]]:
    """The op three ways: opclass's class call and torch.ops, and a Library-defined twin."""
    key, body = STYLES[style]
    Op = type("Op", (CustomOp,), {style: staticmethod(body), "__annotations__": {}}, name=f"{ns}::op", schema="(Tensor x, float k) -> Tensor")
    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define("op_lib(Tensor x, float k) -> Tensor")
    lib.impl("op_lib", body, key)
    _LIBS.append(lib)
    return {**call_paths(Op), "Library": getattr(torch.ops, ns).op_lib.default}


_LIBS: list[Any] = []


@pytest.fixture(autouse=True)
def _drop_libraries() -> Any:
    yield
    while _LIBS:
        _LIBS.pop()._destroy()


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - errors are compared too
        return (type(e).__name__, str(e).splitlines()[0].replace("op_lib", "op"))
    return out


@pytest.mark.parametrize("style", list(STYLES))
def test_matches_library_in_every_context(ns: str, style: str) -> None:
    ops = _ops(ns, style)
    x = torch.randn(4)
    seen: dict[str, list[Any]] = {}
    for label, op in ops.items():
        got: list[Any] = []
        got.append(_outcome(lambda: op(x, 2.0)))
        got.append(_outcome(lambda: op(x, -1.0)))
        with torch.inference_mode():
            got.append(_outcome(lambda: op(x, 2.0)))
        with FakeTensorMode() as mode:
            fake = _outcome(lambda: op(mode.from_tensor(x), 2.0))
            got.append(fake if isinstance(fake, tuple) else (type(fake).__name__, fake.shape, fake.dtype))
            got.append(_outcome(lambda: op(mode.from_tensor(x), -1.0)))
        with _Seen() as seen_ops:
            op(x, 2.0)
        got.append(seen_ops.ops)
        w = x.clone().requires_grad_()
        out = op(w, 2.0)
        out.sum().backward()
        got.append((out.grad_fn.name(), w.grad))
        seen[label] = got
    reference = seen.pop("Library")
    for label, got in seen.items():
        for a, b in zip(got, reference):
            if isinstance(b, Tensor):
                assert torch.equal(a, b), label
            elif isinstance(b, tuple) and any(isinstance(v, Tensor) for v in b):
                assert a[0] == b[0] and torch.equal(a[1], b[1]), label
            else:
                assert a == b, (label, a, b)
    # The mode sees the body's ops, never the op; Autograd-only has no kernel below autograd.
    assert reference[5] == (["silu", "mul"] if style == "composite" else ["mul", "round", "div"])
    assert (reference[2][0] == "NotImplementedError") == (style == "autograd")


@pytest.mark.parametrize("style", list(STYLES))
def test_export_and_compile_match_library(ns: str, style: str) -> None:
    ops = _ops(ns, style)

    class M(torch.nn.Module):
        def __init__(self, op: Any) -> None:
            super().__init__()
            self.op = op

        def forward(self, x: Tensor) -> Tensor:
            return self.op(x, 2.0)

    graphs = {}
    for label in ("Op(...)", "Library"):
        ep = _outcome(lambda: torch.export.export(M(ops[label]), (torch.randn(4),)).run_decompositions())
        graphs[label] = ep if isinstance(ep, tuple) else [str(n.target).replace("op_lib", "op") for n in ep.graph.nodes if n.op == "call_function"]
    assert graphs["Op(...)"] == graphs["Library"]
    torch._dynamo.reset()
    x = torch.randn(4)
    compiled = _outcome(lambda: torch.compile(lambda x: ops["Op(...)"](x, 2.0), backend="aot_eager", fullgraph=True)(x))
    torch._dynamo.reset()
    twin = _outcome(lambda: torch.compile(lambda x: ops["Library"](x, 2.0), backend="aot_eager", fullgraph=True)(x))
    assert (type(compiled), type(twin)) == (Tensor, Tensor) and torch.equal(compiled, twin)


def test_composite_refuses_kernels_it_would_shadow(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Both(CustomOp, name=f"{ns}::both"):
            @staticmethod
            def composite(x: Tensor) -> Tensor:
                return x * 2

            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)

    assert info.value.hook == "composite"
    assert "Both.abstract would never run" in str(info.value) and "drop abstract" in str(info.value)


def test_composite_is_a_documented_hook() -> None:
    assert opclass.hooks()["composite"].backend and "CompositeImplicitAutograd" in opclass.hooks()["composite"].doc


@pytest.mark.parametrize("style", list(STYLES))
def test_opcheck_passes_as_for_the_library_twin(ns: str, style: str) -> None:
    ops = _ops(ns, style)
    results = {}
    for label in ("Op.op(...)", "Library"):
        results[label] = torch.library.opcheck(ops[label], (torch.randn(3, requires_grad=True), 2.0))
    assert results["Op.op(...)"] == results["Library"]
    assert set(results["Library"].values()) == {"SUCCESS"}
