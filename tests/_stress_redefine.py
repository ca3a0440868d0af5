"""Threads that call, define and redefine one op at once; run by tests/test_concurrency.py in a
subprocess per guard (``OPCLASS_GUARD``), since a guard is chosen once per process.

    python tests/_stress_redefine.py THREADS STEPS_PER_THREAD

Each thread, step by step: every fifth step runs the op's class statement again (the same
statement a worker thread runs on its first request, as lazily defined ops do); the other steps
call the op through the class object the thread holds (the live one, or one replaced since),
through ``torch.ops`` and the live class, with and without grad, and check the values. Prints one
JSON line: the counts and every error seen (type and first line).
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import torch
from torch import Tensor

import opclass

QUALNAME = "stress_redefine::scale"


def define() -> Any:
    class Scale(opclass.CustomOp, name=QUALNAME):
        @staticmethod
        def cpu(x: Tensor, factor: float = 2.0) -> Tensor:
            return x * factor

        @staticmethod
        def abstract(x: Tensor, factor: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            return grad * ctx.factor, None

    return Scale


def main(threads: int, steps: int) -> dict[str, Any]:
    errors: list[str] = []
    counts = {"definitions": 0, "calls": 0}
    lock = threading.Lock()
    start = threading.Barrier(threads)
    define()

    def work(i: int) -> None:
        cls = define()
        x = torch.arange(3.0)
        start.wait()
        for step in range(steps):
            kind = "definitions" if (i + step) % 5 == 0 else "calls"
            try:
                if kind == "definitions":
                    cls = define()
                else:
                    leaf = torch.arange(3.0, requires_grad=True)
                    fn = (cls, torch.ops.stress_redefine.scale, torch.ops.stress_redefine.scale.default)[step % 3]
                    with torch.no_grad() if step % 4 == 0 else torch.enable_grad():
                        out = fn(leaf if step % 2 else x)
                    if not torch.equal(out.detach(), x * 2):
                        raise AssertionError(f"{fn} gave {out}")
                    if out.requires_grad:
                        out.sum().backward()
                        if leaf.grad is None or not torch.equal(leaf.grad, torch.full((3,), 2.0)):
                            raise AssertionError(f"{fn}: gradient {leaf.grad}")
            except Exception as e:  # noqa: BLE001 - every error is the finding
                with lock:
                    errors.append(f"{kind}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            with lock:
                counts[kind] += 1

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    sys.setswitchinterval(1e-5)
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"guard": opclass.guard_info().partition(":")[0], **counts, "errors": errors}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
