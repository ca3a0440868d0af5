"""opclass quickstart: the README's op, called eagerly, with grad, compiled, and checked.

The op is ``NumpySin`` from ``examples/numpy_sin.py``, the README's walk-through as a script.
This script prints one line per check, and shows the error a misspelled hook gets when the class
is created. For what a call costs, run ``python -m benchmarks`` from the repository root (it takes
repeated timings and reports medians).

Run: ``python examples/quickstart.py``
"""

from __future__ import annotations

import time
from typing import Callable

import torch
from numpy_sin import NumpySin  # examples/numpy_sin.py: the script's directory is on sys.path
from torch import Tensor

import opclass
from opclass import CustomOp


def _check(name: str, fn: Callable[[], str]) -> tuple[str, str, str]:
    start = time.perf_counter()
    try:
        detail = fn()
        status = "ok"
    except Exception as e:  # the table reports failures instead of stopping at the first
        detail, status = f"{type(e).__name__}: {e}"[:100], "FAILED"
    return name, status, f"{detail} ({(time.perf_counter() - start) * 1e3:.0f} ms)"


def main() -> int:
    x = torch.randn(8, dtype=torch.float64)

    def eager() -> str:
        torch.testing.assert_close(NumpySin(x), x.sin())
        torch.testing.assert_close(torch.ops.ex_numpy.numpy_sin(x), x.sin())
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

    def definition() -> str:
        try:

            class Bad(CustomOp, name="quickstart::bad"):
                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x.sin()

                @staticmethod
                def abstarct(x: Tensor) -> Tensor:  # misspelled: custom_op would not notice
                    return torch.empty_like(x)

        except opclass.OpDefinitionError as e:
            return f"caught at class creation: {e}"
        raise AssertionError("the misspelled hook was accepted")

    def guard() -> str:
        return f"{opclass.guard_backend()} (per-call cost: python -m benchmarks)"

    checks = (
        ("eager", eager),
        ("grad", grad),
        ("torch.compile", compiled),
        ("opcheck", opcheck),
        ("definition", definition),
        ("guard", guard),
    )
    rows = [_check(n, f) for n, f in checks]
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  status  detail")
    for name, status, detail in rows:
        print(f"{name:<{width}}  {status:<6}  {detail}")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
