"""``traceable = True``: torch.compile traces into the op's kernels, eager keeps the fast path.

What needs no GPU runs everywhere: a kernel made of torch ops is traced like a Triton one, so
the mechanism (FunctionalTensorMode rule, fake kernel, eager switch, export, cache table) is
checked on CPU. With Triton installed, AOTAutograd traces a Triton launch over fake CUDA
Tensors (no GPU needed). With CUDA and Triton, inductor compiles the Triton kernel itself.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import pytest
import torch
from torch import Tensor
from torch._library import triton as torch_triton
from torch._library.triton import is_wrap_triton_enabled

import opclass
from opclass._harness import call_paths

from _paths import assert_paths_agree

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="needs triton")
needs_cuda_triton = pytest.mark.skipif(not (HAS_TRITON and torch.cuda.is_available()), reason="needs CUDA and triton")


def _mix_class(ns: str, seen: list[bool]) -> Any:
    class Mix(opclass.CustomOp, name=f"{ns}::mix"):
        traceable = True

        @staticmethod
        def default(x: Tensor, y: Tensor, alpha: float = 0.5) -> Tensor:
            seen.append(is_wrap_triton_enabled())
            return x * alpha + y.sin()

    return Mix


def _compiled_graph(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """``torch.compile(fn)(*args)`` through AOTAutograd, and the forward graph's code."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch._aot_autograd.utils import make_boxed_func

    graphs: list[str] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Callable[..., Any]:
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)  # AOTAutograd calls compiled graphs with a boxed list

    torch._dynamo.reset()
    try:
        out = torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep))(*args)
    finally:
        torch._dynamo.reset()
    return out, graphs[0]


# --------------------------------------------------------------------------- eager


def test_eager_keeps_the_fast_path_with_wrap_triton_off(ns: str) -> None:
    seen: list[bool] = []
    Mix = _mix_class(ns, seen)
    record = Mix.record
    assert "traceable" in opclass.hooks() and record.hooks["traceable"] is True
    assert str(record.plan) == "fast path: cpu, cuda"
    # The plan's kernel is the switched one, and errors still name the user's hook.
    kernel = record.plan.kernels["cpu"]
    assert kernel.user.__wrapped__ is record.hooks["default"] and kernel.where == f"{ns}::mix (Mix.default)"
    x, y = torch.randn(4), torch.randn(4)
    seen.clear()
    assert_paths_agree(Mix, lambda: ((x, y), {}))
    assert seen == [False] * len(call_paths(Mix)), seen  # every path, the dispatcher's included
    assert is_wrap_triton_enabled()  # restored after the call
    torch.testing.assert_close(Mix(x, y, 2.0), x * 2 + y.sin())


def test_switch_is_restored_when_the_kernel_raises(ns: str) -> None:
    class Fails(opclass.CustomOp, name=f"{ns}::fails"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            raise ValueError("kernel failed")

    for call in call_paths(Fails).values():
        with pytest.raises(ValueError, match="kernel failed"):
            call(torch.ones(1))
        assert is_wrap_triton_enabled()


def test_opcheck_on_cpu(ns: str) -> None:
    Mix = _mix_class(ns, [])
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    result = torch.library.opcheck(Mix.op, (x, y), {"alpha": 3.0})
    assert set(result.values()) == {"SUCCESS"}


# --------------------------------------------------------------------------- tracing


def test_compile_traces_into_the_kernel(ns: str) -> None:
    seen: list[bool] = []
    Mix = _mix_class(ns, seen)
    x, y = torch.randn(5), torch.randn(5)
    out, code = _compiled_graph(lambda a, b: Mix(a, b, 2.0) + 1, x, y)
    torch.testing.assert_close(out, x * 2 + y.sin() + 1)
    assert "aten.sin" in code and "aten.mul" in code, code
    assert f"{ns}.mix" not in code, code
    assert True in seen  # traced with wrap_triton on, so Triton launches become graph nodes


def test_false_changes_nothing(ns: str) -> None:
    class Opaque(opclass.CustomOp, name=f"{ns}::opaque"):
        traceable = False

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.sin()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    assert Opaque.record.plan.kernels["cpu"].user is Opaque.record.hooks["default"]
    _, code = _compiled_graph(lambda a: Opaque(a) + 1, torch.randn(3))
    assert f"{ns}.opaque.default" in code and "aten.sin" not in code, code
    assert f"{ns}::opaque" not in torch_triton.triton_ops_to_kernels


def test_compile_with_grad_uses_the_formula(ns: str) -> None:
    class Cube(opclass.CustomOp, name=f"{ns}::cube"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * x * x

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x

    x = torch.randn(4, requires_grad=True)
    out, code = _compiled_graph(lambda a: Cube(a).sum(), x)
    assert "aten.mul" in code and f"{ns}.cube" not in code, code
    (grad,) = torch.autograd.grad(out, x)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)


def test_only_the_listed_devices_are_traced(ns: str) -> None:
    class CpuOpaque(opclass.CustomOp, name=f"{ns}::cpu_opaque"):
        traceable = ("cuda",)

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(x.numpy() * 2)  # NumPy: not traceable

        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    x = torch.randn(3)
    out, code = _compiled_graph(lambda a: CpuOpaque(a) + 1, x)
    torch.testing.assert_close(out, x * 2 + 1)
    assert f"{ns}.cpu_opaque.default" in code, code
    assert CpuOpaque.record.plan.kernels["cpu"].user is CpuOpaque.record.hooks["cpu"]  # untouched
    assert CpuOpaque.record.plan.kernels["cuda"].user.__wrapped__ is CpuOpaque.record.hooks["cuda"]


def test_export_keeps_the_op(ns: str) -> None:
    Mix = _mix_class(ns, [])

    class Model(torch.nn.Module):
        def forward(self, a: Tensor, b: Tensor) -> Tensor:
            return Mix(a, b) * 2

    x, y = torch.randn(3), torch.randn(3)
    ep = torch.export.export(Model(), (x, y))
    assert [n.target for n in ep.graph.nodes if n.op == "call_function"].count(Mix.op) == 1
    torch.testing.assert_close(ep.module()(x, y), Mix(x, y) * 2)


def test_inherited_from_a_base(ns: str) -> None:
    class Traced(opclass.CustomOp, namespace=ns):
        traceable = True

    class Twice(Traced):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + x

    _, code = _compiled_graph(lambda a: Twice(a), torch.randn(2))
    assert "aten.add" in code and f"{ns}.twice" not in code, code


# --------------------------------------------------------------------------- fake kernel


def test_the_traced_kernel_is_the_fake_kernel(ns: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    Mix = _mix_class(ns, [])
    with FakeTensorMode():
        out = Mix(torch.empty(2, 3), torch.empty(2, 3))
    assert out.shape == (2, 3) and type(out).__name__ == "FakeTensor"


def test_abstract_wins_over_the_kernel(ns: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls: list[str] = []

    class WithAbstract(opclass.CustomOp, name=f"{ns}::with_abstract"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            calls.append("default")
            return x.clone()

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            calls.append("abstract")
            return torch.empty_like(x)

    with FakeTensorMode():
        WithAbstract(torch.empty(2))
    assert calls == ["abstract"]


def test_untraced_device_without_abstract_has_no_fake_kernel(ns: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    class CpuOpaque(opclass.CustomOp, name=f"{ns}::cpu_opaque"):
        traceable = ("cuda",)

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x * 2

    with pytest.raises(RuntimeError) as info, FakeTensorMode():
        CpuOpaque(torch.empty(2))
    assert str(info.value) == (
        f"{ns}::cpu_opaque has no fake kernel for cpu tensors, which torch.compile, torch.export and FakeTensor need: "
        "its cpu kernel is not traceable; define CpuOpaque.abstract (same arguments; build outputs with torch.empty_like etc.)"
    )


# --------------------------------------------------------------------------- AOTAutograd's cache key


def test_cache_table_entry_lives_with_the_op(ns: str) -> None:
    Mix = _mix_class(ns, [])
    entry = torch_triton.triton_ops_to_kernels[f"{ns}::mix"]
    assert [fns for _, fns in entry.kernels.values()] == [[Mix.record.hooks["default"]]]
    Mix2 = _mix_class(ns, [])  # a redefinition replaces the kernels it lists
    assert torch_triton.triton_ops_to_kernels[f"{ns}::mix"].kernels[f"{ns}::mix"][0] is Mix2.record
    opclass.remove(Mix2)
    assert f"{ns}::mix" not in torch_triton.triton_ops_to_kernels


# --------------------------------------------------------------------------- definition errors


def _define(ns: str, value: Any, *, kernels: tuple[str, ...] = ("default",), **extra: Any) -> Any:
    def kernel(x: Tensor) -> Tensor:
        return x.clone()

    body: dict[str, Any] = {"traceable": value, **{k: staticmethod(kernel) for k in kernels}, **extra}
    return type(opclass.CustomOp)("Bad", (opclass.CustomOp,), body, name=f"{ns}::bad")


@pytest.mark.parametrize(
    ("value", "kernels", "extra", "message"),
    [
        ("yes", ("default",), {}, "Bad.traceable: must be True, False, 'reference' or device types like ('cuda',), got 'yes'; write traceable = True"),
        ((), ("default",), {}, "Bad.traceable: must be True, False, 'reference' or device types like ('cuda',), got (); write traceable = True"),
        (("gpu",), ("default",), {}, "Bad.traceable: 'gpu' is not a torch device type; use e.g. 'cuda' or 'cpu'"),
        (("cuda",), ("cpu",), {}, "Bad.traceable: traces the cuda kernel, but the class has none; define Bad.cuda or Bad.default, or drop 'cuda'"),
        (True, ("default",), {"eager_autograd": True}, "Bad.traceable: torch.compile would trace into the kernel, and eager_autograd keeps it one opaque op there; keep either traceable or eager_autograd = True"),
    ],
    ids=["not-bool", "empty", "unknown-device", "no-kernel", "eager-autograd"],
)
def test_definition_errors(ns: str, value: Any, kernels: tuple[str, ...], extra: dict[str, Any], message: str) -> None:
    with pytest.raises(opclass.OpDefinitionError) as info:
        _define(ns, value, kernels=kernels, **extra)
    assert str(info.value) == message
    assert not hasattr(getattr(torch.ops, ns), "bad")


def test_definition_error_for_a_second_functional_rule(ns: str) -> None:
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    rules = {FunctionalTensorMode: lambda mode, func, types, args, kwargs: NotImplemented}
    with pytest.raises(opclass.OpDefinitionError) as info:
        _define(ns, True, torch_dispatch=rules)
    assert str(info.value) == (
        "Bad.traceable: traces the kernel through a FunctionalTensorMode rule, and torch_dispatch has one too; "
        "drop the FunctionalTensorMode entry of torch_dispatch, or traceable"
    )


# --------------------------------------------------------------------------- Triton


def _triton_add_class(ns: str, seen: list[bool]) -> Any:
    import triton
    import triton.language as tl
    from torch.library import wrap_triton

    @triton.jit
    def opclass_test_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    class TritonAdd(opclass.CustomOp, name=f"{ns}::triton_add"):
        traceable = True

        @staticmethod
        def cuda(x: Tensor, y: Tensor) -> Tensor:
            seen.append(is_wrap_triton_enabled())
            out = torch.empty_like(x)
            n = out.numel()
            wrap_triton(opclass_test_add_kernel)[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
            return out

        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x + y

    return TritonAdd


@needs_triton
def test_triton_launch_is_traced_over_fake_cuda_tensors(ns: str) -> None:
    from torch._functorch.aot_autograd import aot_export_module
    from torch._subclasses.fake_tensor import FakeTensorMode

    TritonAdd = _triton_add_class(ns, [])

    class Model(torch.nn.Module):
        def forward(self, a: Tensor, b: Tensor) -> tuple[Tensor]:
            return (TritonAdd(a, b) * 2,)

    with FakeTensorMode():
        x, y = torch.empty(1000, device="cuda"), torch.empty(1000, device="cuda")
        gm, _ = aot_export_module(Model(), (x, y), trace_joint=False)
    assert "triton_kernel_wrapper_functional" in gm.code and f"{ns}.triton_add" not in gm.code, gm.code
    kernels = list(torch_triton.triton_ops_to_kernels[f"{ns}::triton_add"])
    assert [k.fn.__name__ for k in kernels] == ["opclass_test_add_kernel"]


@needs_cuda_triton
def test_triton_eager_on_cuda(ns: str) -> None:
    seen: list[bool] = []
    TritonAdd = _triton_add_class(ns, seen)
    assert "cuda" in TritonAdd.record.plan.kernels
    x, y = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
    assert_paths_agree(TritonAdd, lambda: ((x, y), {}))
    torch.testing.assert_close(TritonAdd(x, y), x + y)
    assert seen and not any(seen)  # plain launches, never the higher-order op
    result = torch.library.opcheck(TritonAdd.op, (x, y))
    assert set(result.values()) == {"SUCCESS"}


@pytest.mark.slow
@needs_cuda_triton
def test_inductor_compiles_the_triton_kernel(ns: str) -> None:
    from torch._inductor.utils import run_and_get_code

    TritonAdd = _triton_add_class(ns, [])
    x, y = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda a, b: TritonAdd(a, b).relu(), fullgraph=True, backend="inductor")
        out, code = run_and_get_code(compiled, x, y)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(out, (x + y).relu())
    assert any("opclass_test_add_kernel" in c for c in code), code
    assert not any(f"{ns}.triton_add" in c for c in code), code
