"""What defining an op class costs (and its first call), for the definition-cost work.

    python tools/defcost.py            # 200 ops sharing one set of hooks: ms per op, first call
    python tools/defcost.py distinct   # each op with its own hook functions (as in a real library)
    python tools/defcost.py prof [N]   # cProfile of the definitions, top N by cumulative time
    python tools/defcost.py tottime [N]
    python tools/defcost.py nocall     # definitions without building the class call (no first call)
    ... n=1000                         # (after any mode) define 1000 ops instead of 200
    ... collect                        # (after any mode) gc.collect() first: without the one full
                                       # collection of torch's heap that the first ~70k objects
                                       # allocated after `import torch` trigger, whatever allocates them

Run from the checkout's root (the checkout's opclass is imported). Timings only; no assertions.
"""

import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

import opclass  # noqa: E402


def kernel(a: Tensor, b: Tensor) -> Tensor:
    return a.clone()


def fake(a: Tensor, b: Tensor) -> Tensor:
    return torch.empty_like(a)


def sc(ctx, inputs, output):  # type: ignore[no-untyped-def]
    pass


def bw(ctx, g):  # type: ignore[no-untyped-def]
    return g, None


def hooks(distinct: bool) -> tuple:  # type: ignore[type-arg]
    if not distinct:
        return kernel, fake, sc, bw

    def k(a: Tensor, b: Tensor) -> Tensor:
        return a.clone()

    def f(a: Tensor, b: Tensor) -> Tensor:
        return torch.empty_like(a)

    def s(ctx, inputs, output):  # type: ignore[no-untyped-def]
        pass

    def g(ctx, grad):  # type: ignore[no-untyped-def]
        return grad, None

    return k, f, s, g


def define(i: int, distinct: bool = False) -> type:
    k, f, s, g = hooks(distinct)

    class Clone(opclass.CustomOp, name=f"defcost::clone{i}" if i >= 0 else "defcost::warmup"):
        cpu = staticmethod(k)
        abstract = staticmethod(f)
        setup_context = staticmethod(s)
        backward = staticmethod(g)

    return Clone


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    distinct = mode == "distinct"
    if mode == "nocall" or "nocall" in sys.argv[2:]:
        # What a definition costs once the call is built on first use instead (the classes
        # defined this way cannot be called).
        from opclass.callpath import classcall

        classcall.arm = lambda record, cls: None  # type: ignore[assignment]
    define(-1)
    # n=1000: a longer run, where full collections of the heap recur (each surviving object
    # brings the next one closer): their amortized cost is part of what a definition costs.
    n = next((int(a[2:]) for a in sys.argv[1:] if a.startswith("n=")), 200)
    if "collect" in sys.argv[1:]:
        import gc

        gc.collect()
    if mode in ("prof", "tottime"):
        top = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 45
        prof = cProfile.Profile()
        prof.enable()
        for i in range(n):
            define(i)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative" if mode == "prof" else "tottime").print_stats(top)
        return
    t, cpu = time.perf_counter(), time.process_time()
    ops = [define(i, distinct) for i in range(n)]
    dt = time.perf_counter() - t
    # CPU time too: other processes on the machine stretch the wall-clock figure.
    cpu = time.process_time() - cpu
    if mode == "nocall":
        print(f"{dt:.3f} s total, {dt / n * 1e3:.3f} ms/op ({cpu / n * 1e3:.3f} CPU) without building the call ({opclass.__file__})")
        return
    x = torch.randn(3)
    t = time.perf_counter()
    ops[0](x, x)
    first = time.perf_counter() - t
    t = time.perf_counter()
    ops[0](x, x)
    second = time.perf_counter() - t
    print(f"{dt:.3f} s total, {dt / n * 1e3:.3f} ms/op ({cpu / n * 1e3:.3f} CPU), first call {first * 1e3:.3f} ms, second call {second * 1e3:.3f} ms ({opclass.__file__})")


if __name__ == "__main__":
    main()
