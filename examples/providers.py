"""One op, several kernels: RMSNorm with a torch reference and four providers.

``RMSNorm.default`` is the op in torch ops: the reference every provider is held to, what a
deployed program decomposes into, and the kernel wherever no provider runs. The providers:

* ``numpy`` (CPU): float32 and float64;
* ``cpp`` (CPU): a C++ kernel built with ``torch.utils.cpp_extension`` on its first call and
  cached (as the native guard is); float32, contiguous; unavailable without a compiler;
* ``triton`` (CUDA): a Triton kernel, where Triton and a GPU are present;
* ``cuda_ext`` (CUDA): a CUDA C++ kernel, where a GPU and nvcc are present.

The script shows which provider runs for which input and why the others do not, changes the
order for a block and with a mode, holds every provider to the reference with
``opclass.testing.check_op``, times them, and compiles and exports the op.

    python examples/providers.py
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

import opclass
import opclass.testing

# --------------------------------------------------------------------------- the C++ and CUDA kernels

_CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.is_contiguous() && weight.is_contiguous(), "rms_norm: float32, contiguous");
  auto out = torch::empty_like(x);
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  const float* xs = x.data_ptr<float>();
  const float* ws = weight.data_ptr<float>();
  float* os = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += double(xs[r * n + i]) * xs[r * n + i];
    const float inv = 1.0f / std::sqrt(float(acc / n) + float(eps));
    for (int64_t i = 0; i < n; ++i) os[r * n + i] = xs[r * n + i] * inv * ws[i];
  }
  return out;
}
"""

_CUDA = r"""
#include <torch/extension.h>

__global__ void rms_norm_kernel(const float* x, const float* w, float* out, int64_t n, float eps) {
  const int64_t row = blockIdx.x;
  __shared__ float partial[256];
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[row * n + i] * x[row * n + i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / n + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[row * n + i] = x[row * n + i] * inv * w[i];
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.is_contiguous(), "rms_norm: float32, contiguous, CUDA");
  auto out = torch::empty_like(x);
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  if (rows) rms_norm_kernel<<<rows, 256>>>(x.data_ptr<float>(), weight.data_ptr<float>(), out.data_ptr<float>(), n, float(eps));
  return out;
}
"""
_CUDA_DECL = "torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);"
_BUILT: dict[str, Any] = {}


def _build(kind: str) -> Any:
    """The compiled module, built once per torch version and source into the cache directory."""
    if kind not in _BUILT:
        from torch.utils.cpp_extension import load_inline

        source = _CPP if kind == "cpp" else _CUDA
        tag = hashlib.sha256(source.encode()).hexdigest()[:12]
        root = Path(os.environ.get("OPCLASS_CACHE_DIR") or Path.home() / ".cache" / "opclass")
        directory = root / "".join(c if c.isalnum() or c in "-._" else "_" for c in f"example-rms-{kind}-torch{torch.__version__}-{tag}")
        directory.mkdir(parents=True, exist_ok=True)
        sources = {"cpp_sources": source} if kind == "cpp" else {"cpp_sources": _CUDA_DECL, "cuda_sources": source}
        _BUILT[kind] = load_inline(name=f"opclass_example_rms_{kind}", functions=["rms_norm"], build_directory=str(directory), extra_cflags=["-O2"], **sources)
    return _BUILT[kind]


def _cpp_available() -> bool:
    # Cheap, as an availability check must be (it runs when the class is defined): a compiler and
    # ninja to build with. The build itself happens on the first call, once. ImportError says
    # what is missing (explain_providers shows it); False would say only "not available".
    for missing, found in ((os.environ.get("CXX", "c++"), shutil.which(os.environ.get("CXX", "c++"))), ("ninja", importlib.util.find_spec("ninja"))):
        if found is None:
            raise ImportError(f"{missing} is not installed: the C++ provider builds with a C++ compiler and ninja")
    return True


def _cuda_ext_available() -> bool:
    from torch.utils.cpp_extension import CUDA_HOME

    return torch.cuda.is_available() and CUDA_HOME is not None and _cpp_available()


def _triton_available() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None


_triton_kernel: Any = None


def _triton_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    global _triton_kernel
    import triton
    import triton.language as tl

    if _triton_kernel is None:

        @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
        def kernel(x_ptr, w_ptr, out_ptr, n, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            mask = cols < n
            x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
            inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + row * n + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)

        _triton_kernel = kernel
    out = torch.empty_like(x)
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    if rows:
        _triton_kernel[(rows,)](x, weight, out, n, eps, BLOCK=triton.next_power_of_2(n))
    return out


def _contiguous_float32(x: Tensor, weight: Tensor, eps: float = 1e-6) -> bool:
    return x.dtype == torch.float32 and x.is_contiguous() and weight.is_contiguous() and x.shape[-1] > 0


# --------------------------------------------------------------------------- the op


class RMSNorm(opclass.CustomOp, name="opclass_examples::rms_norm"):
    """``x / sqrt(mean(x**2, -1) + eps) * weight``."""

    @staticmethod
    def default(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    @staticmethod
    def abstract(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return torch.empty_like(x)

    @opclass.provider("cuda", available=_triton_available, supports=lambda x, weight, eps: x.is_contiguous() and 0 < x.shape[-1] <= 16384, batch_invariant=True, atol=1e-3, rtol=1e-3)
    @staticmethod
    def triton(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return _triton_rms_norm(x, weight, eps)

    @opclass.provider("cuda", available=_cuda_ext_available, supports=_contiguous_float32, batch_invariant=True, atol=1e-4, rtol=1e-4)
    @staticmethod
    def cuda_ext(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return _build("cuda").rms_norm(x, weight, eps)  # type: ignore[no-any-return]

    @opclass.provider("cpu", available=_cpp_available, supports=_contiguous_float32, batch_invariant=True, atol=1e-5, rtol=1e-5)
    @staticmethod
    def cpp(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return _build("cpp").rms_norm(x, weight, eps)  # type: ignore[no-any-return]

    @opclass.provider("cpu", supports=lambda x, weight, eps: x.dtype in (torch.float32, torch.float64), batch_invariant=True, atol=1e-5, rtol=1e-5)
    @staticmethod
    def numpy(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        a = x.detach().numpy()
        out = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps) * weight.detach().numpy()
        # The layout the fake kernel promises (empty_like: x's strides), as every provider must.
        return torch.empty_like(x).copy_(torch.from_numpy(np.asarray(out, dtype=a.dtype)))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, weight, eps = inputs
        ctx.save_for_backward(x, weight)
        ctx.eps = eps

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, weight = ctx.saved_tensors
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
        normed = x * inv
        gx = grad * weight
        dx = inv * (gx - normed * (gx * normed).mean(-1, keepdim=True))
        dw = (grad * normed).reshape(-1, x.shape[-1]).sum(0)
        return dx, dw, None

    @staticmethod
    def samples() -> list[opclass.testing.Sample]:
        g = torch.Generator().manual_seed(0)
        samples = [
            opclass.testing.Sample((torch.randn(4, 64, generator=g), torch.randn(64, generator=g)), name="float32"),
            opclass.testing.Sample((torch.randn(3, 32, dtype=torch.float64, generator=g), torch.randn(32, dtype=torch.float64, generator=g)), name="float64"),
            opclass.testing.Sample((torch.randn(64, 4, generator=g).t(), torch.randn(64, generator=g)), name="transposed"),
        ]
        if torch.cuda.is_available():
            samples.append(opclass.testing.Sample((torch.randn(8, 256, device="cuda", generator=None), torch.randn(256, device="cuda")), name="cuda"))
        return samples


def main() -> None:
    x, weight = torch.randn(4, 64), torch.randn(64)
    print(repr(RMSNorm.record))
    print(opclass.explain_providers(RMSNorm, x, weight))
    print(opclass.explain_providers(RMSNorm, x.t().contiguous().t(), weight))  # not contiguous: cpp declines
    with opclass.use_providers({RMSNorm: ["numpy", "default"]}):
        print(opclass.explain_providers(RMSNorm, x, weight))
    torch.testing.assert_close(RMSNorm(x, weight), RMSNorm.default(x, weight), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(RMSNorm.op(x, weight), RMSNorm.default(x, weight), atol=1e-5, rtol=1e-5)

    opclass.testing.check_op(RMSNorm)  # every available provider against the reference, on every sample
    print("check_op: every available provider agrees with the reference")
    tuned = opclass.tune_providers(RMSNorm, min_run_time=0.05)  # .save(path), then opclass.load_tuning(path) or OPCLASS_TUNING
    print("measured order:", tuned.order)

    xg = x.clone().requires_grad_()
    RMSNorm(xg, weight).sum().backward()
    compiled = torch.compile(lambda t, w: RMSNorm(t, w) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, weight), RMSNorm(x, weight) * 2)

    class Norm(torch.nn.Module):
        def forward(self, t: Tensor, w: Tensor) -> Tensor:
            return RMSNorm(t, w)

    ep = torch.export.export(Norm(), (x, weight)).run_decompositions(opclass.decompositions(RMSNorm))
    assert not any(n.target == RMSNorm.op for n in ep.graph.nodes)  # the reference, in torch ops
    torch.testing.assert_close(ep.module()(x, weight), RMSNorm.default(x, weight))
    print("compiled, exported and decomposed into the reference")


if __name__ == "__main__":
    main()
