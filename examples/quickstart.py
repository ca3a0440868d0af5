"""opclass quickstart: define an op as a class, then call it eagerly, with grad, compiled, and check it.

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import Tensor

import opclass
from opclass import CustomOp


class NumpySin(CustomOp, name="quickstart::numpy_sin"):
    """sin(x) computed by NumPy: opaque to torch.compile, differentiable through `backward`."""

    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        return torch.from_numpy(np.sin(x.numpy()))

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * x.cos()


def _check(name: str, fn) -> tuple[str, str, str]:
    start = time.perf_counter()
    try:
        detail = fn()
        status = "ok"
    except Exception as e:  # the table reports failures instead of stopping at the first
        detail, status = f"{type(e).__name__}: {e}"[:60], "FAILED"
    return name, status, f"{detail} ({(time.perf_counter() - start) * 1e3:.0f} ms)"


def main() -> int:
    x = torch.randn(8, dtype=torch.float64)

    def eager() -> str:
        torch.testing.assert_close(NumpySin(x), x.sin())
        torch.testing.assert_close(torch.ops.quickstart.numpy_sin(x), x.sin())
        return f"schema {NumpySin.qualname}{NumpySin.schema}"

    def grad() -> str:
        xg = x.clone().requires_grad_()
        NumpySin(xg).sum().backward()
        torch.testing.assert_close(xg.grad, x.cos())
        assert torch.autograd.gradcheck(NumpySin, (xg,))
        return "grad == cos(x), gradcheck passed"

    def compiled() -> str:
        fn = torch.compile(lambda t: NumpySin(t) * 2, backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(fn(x), 2 * x.sin())
        return "fullgraph=True, aot_eager"

    def opcheck() -> str:
        results = torch.library.opcheck(NumpySin.op, (x.clone().requires_grad_(),))
        return ", ".join(k.removeprefix("test_") for k, v in results.items() if v == "SUCCESS")

    def speed() -> str:
        from opclass.benchmark import run, targets

        rows = run(min_run_time=0.05, counts=(14,))
        ratio = next(t["ratio"] for t in targets(rows) if t["target"] == "14 args: no-grad / direct")
        return f"14-arg call costs {ratio:.2f}x a direct call ({opclass.guard_backend()} guard)"

    checks = (("eager", eager), ("grad", grad), ("torch.compile", compiled), ("opcheck", opcheck), ("speed", speed))
    rows = [_check(n, f) for n, f in checks]
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  status  detail")
    for name, status, detail in rows:
        print(f"{name:<{width}}  {status:<6}  {detail}")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
