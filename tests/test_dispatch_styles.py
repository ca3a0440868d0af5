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
        if style == "autograd":
            # Nothing runs under inference_mode, for both; opclass's error also says why, and the fix.
            assert got[2][0] == reference[2][0] == "NotImplementedError", (label, got[2])
            assert got[2][1].endswith("::op (Op.autograd): the op's only kernel is at the Autograd key, which torch.inference_mode() skips: "
                                      "call the op outside inference_mode (under torch.no_grad() it runs), or make Op.autograd's code the op's own kernel "
                                      "(Op.default or Op.cpu, with setup_context and backward for its gradients, in place of Op.autograd)"), got[2]
            got[2] = reference[2]
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


def test_an_autograd_body_beside_a_kernel_offers_fixes_that_work(ns: str) -> None:
    class _Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

    with pytest.raises(OpDefinitionError) as info:

        class Both(CustomOp, name=f"{ns}::both"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x * 2

            @staticmethod
            def autograd(x: Tensor) -> Tensor:
                return _Double.apply(x)

    assert str(info.value).endswith(
        "Both.cpu would serve only those; keep autograd alone (it may call the cpu code as a plain function), or drop autograd "
        "and keep cpu, with setup_context and backward for its gradients"
    ), str(info.value)

    # Either fix: the same values and gradients.
    class Alone(CustomOp, name=f"{ns}::alone"):
        @staticmethod
        def autograd(x: Tensor) -> Tensor:
            return _Double.apply(x)

    class Kernel(CustomOp, name=f"{ns}::kernel"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

    for op in (Alone, Kernel):
        x = torch.arange(3.0, requires_grad=True)
        op(x).sum().backward()
        assert x.grad is not None and torch.equal(x.grad, torch.full((3,), 2.0)), op


def test_a_composite_body_calling_numpy_under_grad_names_the_op_and_the_fix(ns: str) -> None:
    class Np(CustomOp, name=f"{ns}::np"):
        @staticmethod
        def composite(x: Tensor) -> Tensor:
            return torch.from_numpy(x.numpy() * 2)

    assert torch.equal(Np(torch.ones(2)), torch.full((2,), 2.0))  # no grad: NumPy runs
    for label, fn in call_paths(Np).items():
        with pytest.raises(RuntimeError) as info:
            fn(torch.ones(2, requires_grad=True))
        assert str(info.value) == (
            f"{ns}::np (Np.composite) calls .numpy() on a Tensor that requires grad, but a composite body must be torch ops, "
            "which autograd differentiates through (.detach() would drop the gradient): write the kernel as default (or cpu) "
            "with setup_context and backward"
        ), label


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


def test_an_autograd_body_with_an_abstract_serves_inference_mode_as_a_meta_kernel_does(ns: str) -> None:
    """torch's fake_quant_per_channel: a kernel at Autograd and one at Meta, which serves meta
    Tensors and FakeTensors under inference_mode, where the Autograd keys are skipped. An
    ``autograd`` body with an ``abstract`` is that op: the same values, errors, graphs and opcheck
    as the Library twin, in every context; the abstract runs exactly where the Meta kernel does."""
    from _twins import failures, outcome, seen

    ran: list[str] = []

    def shape_only(x: Tensor, k: float) -> Tensor:
        ran.append("shape")
        return torch.empty_like(x)

    Op = type("Op", (CustomOp,), {"autograd": staticmethod(_ste), "abstract": staticmethod(shape_only), "__annotations__": {}}, name=f"{ns}::op", schema="(Tensor x, float k) -> Tensor", pt2_compliant=False)
    lib = torch.library.Library(f"{ns}_twin", "FRAGMENT")
    _LIBS.append(lib)
    lib.define("op(Tensor x, float k) -> Tensor")
    lib.impl("op", _ste, "Autograd")
    lib.impl("op", shape_only, "Meta")
    twin = getattr(torch.ops, f"{ns}_twin").op.default
    assert torch._C._dispatch_has_kernel_for_dispatch_key(Op.record.qualname, "Meta")

    calls = [lambda: ((torch.randn(4, generator=torch.Generator().manual_seed(0)), 2.0), {})]
    mine, theirs = seen(Op, calls), seen(twin, calls)
    assert mine == theirs and not failures(mine), (mine, theirs)
    where: dict[Any, list[Any]] = {}
    for op in (Op, twin):
        got = where[op] = []
        for context in ("grad", "inference_mode"):
            for make in (lambda: torch.randn(4, device="meta"), lambda: FakeTensorMode().from_tensor(torch.randn(4)), lambda: torch.randn(4)):
                del ran[:]
                with torch.inference_mode(context == "inference_mode"):
                    result = outcome(lambda: op(make(), 2.0).shape)
                got.append((context, result if isinstance(result, tuple) else list(result), tuple(ran)))
    mine_where, theirs_where = where[Op], where[twin]
    # A real Tensor under inference_mode: nothing serves it, in both; opclass says why and the fix.
    assert mine_where[5][1][0] == theirs_where[5][1][0] == "NotImplementedError"
    assert "Op.autograd): the op's only kernel is at the Autograd key" in mine_where[5][1][1]
    mine_where[5] = theirs_where[5]
    assert mine_where == theirs_where
    # The shape-only kernel runs under inference_mode, for meta Tensors and FakeTensors alone.
    assert [bool(r) for _, _, r in theirs_where] == [False, False, False, True, True, False]
    x = torch.randn(4, requires_grad=True)
    Op(x, 2.0).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [1.0] * 4
    compiled = []
    for op in (Op, twin):
        torch.compiler.reset()
        with torch.inference_mode():
            compiled.append(outcome(lambda: torch.compile(lambda x: op(x, 2.0), backend="aot_eager", fullgraph=True)(torch.tensor([0.3, -1.2, 2.6]))))
    torch.compiler.reset()
    assert compiled[0] == compiled[1] == (torch.float32, [0.5, -1.0, 2.5])
