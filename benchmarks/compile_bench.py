"""How long torch.compile takes to trace chained op calls, per way of calling the op.

:func:`compile_time` runs each measurement in a fresh Python process (dynamo caches what it
traced, so a second compile in one process measures nothing useful) and times the first call of
``torch.compile(fn, backend=..., fullgraph=True)`` (CPU time of the process, so that other
processes on a busy machine disturb it less) where ``fn`` chains ``n_calls`` calls of a
one-Tensor op (``x = CALL(x)`` written out ``n_calls`` times). Before timing, the child compiles one
unrelated function, so dynamo's one-time start-up (lazy imports, first-use set-up) is left out
and the figure is the cost of tracing those calls.

``via`` picks ``CALL``:

- ``"class"``: the op class, ``MyOp(x)``;
- ``"op"``: ``MyOp.op(x)`` (the ``OpOverload``, reached through the class's property);
- ``"overload"``: ``torch.ops.ns.name.default`` bound to a global name beforehand;
- ``"custom_op"``: the same op made with ``torch.library.custom_op``.

Run ``python -m benchmarks.compile_bench`` from the repository root for a table (median of 3
processes each). This module imports nothing beyond the standard library; the child processes
import torch and opclass.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from typing import Literal

Via = Literal["class", "op", "overload", "custom_op"]
VIAS: tuple[Via, ...] = ("class", "op", "overload", "custom_op")

_CHILD = r"""
import sys, time
import torch
from torch import Tensor
import opclass

n_calls, via, backend = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Step(opclass.CustomOp, name="compile_bench::step"):
    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        return x + 1

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        return torch.empty_like(x)

@torch.library.custom_op("compile_bench::custom_step", mutates_args=())
def custom_step(x: Tensor) -> Tensor:
    return x + 1

@custom_step.register_fake
def _(x: Tensor) -> Tensor:
    return torch.empty_like(x)

step_overload = torch.ops.compile_bench.step.default
call = {"class": "Step", "op": "Step.op", "overload": "step_overload", "custom_op": "custom_step"}[via]
source = "def chain(x):\n" + f"    x = {call}(x)\n" * n_calls + "    return x\n"
exec(compile(source, "<opclass compile bench>", "exec"), globals())

x = torch.randn(4)
torch.compile(lambda t: t.neg() + 1, backend=backend, fullgraph=True)(x)  # dynamo's one-time start-up
compiled = torch.compile(chain, backend=backend, fullgraph=True)
start = time.process_time()
out = compiled(x)
elapsed = time.process_time() - start
torch.testing.assert_close(out, x + n_calls)
print(elapsed)
"""


def compile_time(n_calls: int = 400, via: Via = "class", *, backend: str = "aot_eager", repeats: int = 1, python: str | None = None) -> float:
    """CPU seconds torch.compile takes for its first call of ``n_calls`` chained calls made ``via`` one way.

    Each measurement is a fresh process (``python``, default: this interpreter, importing the same
    opclass as this process); with ``repeats > 1`` the result is the median. Compare ``via``
    values measured on one machine, not absolute times across machines.

    Example:
        >>> from benchmarks.compile_bench import compile_time
        >>> ratio = compile_time(400, "class") / compile_time(400, "op")  # doctest: +SKIP
    """
    if via not in VIAS:
        raise ValueError(f"via must be one of {VIAS}, not {via!r}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [python or sys.executable, "-c", _CHILD, str(n_calls), via, backend],
            env=env,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"compile_time({n_calls}, {via!r}) failed:\n{out.stderr}")
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Print the compile time of each ``via`` (median of 3 processes) and its ratio to ``"op"``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--python", default=None, help="interpreter for the child processes (another torch's venv)")
    parser.add_argument("--via", nargs="*", default=list(VIAS), choices=VIAS)
    args = parser.parse_args(argv)
    results = {via: compile_time(args.calls, via, backend=args.backend, repeats=args.repeats, python=args.python) for via in args.via}
    base = results.get("op")
    for via, seconds in results.items():
        ratio = f"  {seconds / base:.2f}x op" if base else ""
        print(f"{via:>10}: {seconds:.3f} s{ratio}")


if __name__ == "__main__":
    main()
