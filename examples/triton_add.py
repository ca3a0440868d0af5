"""A Triton kernel that torch.compile sees: ``traceable = True``.

The ``cuda`` kernel launches a Triton kernel through ``torch.library.wrap_triton``. Eager calls
take opclass's fast path, and the launch goes straight to Triton. Under torch.compile, the op
is traced *into*: inductor sees the Triton kernel (and the torch ops around it) instead of one
opaque call, as with ``torch.library.triton_op``. torch.export keeps the op as one node. The
traced kernel is also the fake kernel, so there is no ``abstract`` to write.

Without CUDA or Triton the script runs the ``cpu`` kernel, made of torch ops, which is traced
the same way: the compiled graph holds its ``aten`` ops, not the op.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor
from torch.library import wrap_triton

import opclass

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the cuda kernel below falls back to torch ops
    triton = None

add_kernel: Any = None
if triton is not None:

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


class TritonAdd(opclass.CustomOp, name="opclass_examples::triton_add"):
    """``x + y`` for Tensors of one shape: Triton on CUDA, torch ops on CPU."""

    traceable = True

    @staticmethod
    def cuda(x: Tensor, y: Tensor) -> Tensor:
        torch._check(x.shape == y.shape, lambda: f"shapes differ: {tuple(x.shape)} and {tuple(y.shape)}")
        if add_kernel is None:
            return x + y
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n_elements = out.numel()

        def grid(meta: dict[str, Any]) -> tuple[int]:
            return (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)

        # wrap_triton: under torch.compile the launch becomes a graph node inductor compiles;
        # in eager, opclass switches the wrapper off and this is a plain launch.
        wrap_triton(add_kernel)[grid](x, y, out, n_elements, BLOCK_SIZE=1024)
        return out

    @staticmethod
    def cpu(x: Tensor, y: Tensor) -> Tensor:
        torch._check(x.shape == y.shape, lambda: f"shapes differ: {tuple(x.shape)} and {tuple(y.shape)}")
        return x + y


def main() -> None:
    on_gpu = torch.cuda.is_available() and triton is not None
    device = "cuda" if on_gpu else "cpu"
    x, y = torch.randn(3000, device=device), torch.randn(3000, device=device)

    # Eager: the fast path runs the kernel directly.
    torch.testing.assert_close(TritonAdd(x, y), x + y)
    print(repr(TritonAdd.record))
    assert device in TritonAdd.record.plan.kernels  # type: ignore[union-attr]
    torch.library.opcheck(TritonAdd.op, (x, y))

    def fn(a: Tensor, b: Tensor) -> Tensor:
        return TritonAdd(a, b) * 2

    if on_gpu:
        # Inductor compiles the Triton kernel itself: its name is in the generated code.
        from torch._inductor.utils import run_and_get_code

        compiled = torch.compile(fn, fullgraph=True, backend="inductor")
        out, code = run_and_get_code(compiled, x, y)
        torch.testing.assert_close(out, (x + y) * 2)
        assert any("add_kernel" in c for c in code), "inductor did not see the Triton kernel"
        print(f"inductor: add_kernel in {len(code)} generated file(s)")
    else:
        # The same mechanism on CPU: AOTAutograd traces into the kernel's torch ops.
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch._aot_autograd.utils import make_boxed_func

        graphs: list[str] = []

        def keep(gm: torch.fx.GraphModule, example_inputs: list[Tensor]) -> Callable[..., Any]:
            graphs.append(gm.code)
            return make_boxed_func(gm.forward)  # AOTAutograd calls compiled graphs with a boxed list

        compiled = torch.compile(fn, fullgraph=True, backend=aot_autograd(fw_compiler=keep))
        torch.testing.assert_close(compiled(x, y), (x + y) * 2)
        assert "aten.add" in graphs[0] and "triton_add" not in graphs[0], graphs[0]
        print("compiled graph (traced into the cpu kernel):", graphs[0].strip().splitlines()[1:3])

    # torch.export keeps the op: one node, no backend-specific kernel source in the program.
    class Model(torch.nn.Module):
        def forward(self, a: Tensor, b: Tensor) -> Tensor:
            return fn(a, b)

    ep = torch.export.export(Model(), (x, y))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    print("exported graph:", targets)
    assert targets.count("opclass_examples.triton_add.default") == 1


if __name__ == "__main__":
    main()
