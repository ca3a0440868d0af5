#!/usr/bin/env python3
"""Print the walk of a class creation and of calls through opclass's modules, in order.

    python tools/walk.py [--all]

Each line is one walk: the opclass modules whose Python code ran, in the order control entered
them (a module repeated only when control came back to it from another one), and the number of
switches between modules. Walks: defining an op class (cpu, abstract, setup_context,
backward), its first call (which generates the call function), a later call without grad,
with grad, and the first call of a function compiled with torch.compile (``aot_eager``).
``--all`` prints every switch instead of the collapsed list. Generated code counts as
``<generated>``; code outside opclass (torch, the kernel) is left out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import Tensor  # noqa: E402

PACKAGE = str(ROOT / "opclass") + os.sep


def _module(filename: str) -> str | None:
    if filename.startswith("<opclass generated"):
        return "<generated>"
    if not filename.startswith(PACKAGE):
        return None
    return "opclass." + filename[len(PACKAGE) :].removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")


def walk(fn: Callable[[], Any]) -> list[str]:
    """The opclass modules entered while ``fn()`` runs, in order, consecutive repeats merged."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = _module(frame.f_code.co_filename)
            if module is not None and (not seen or seen[-1] != module):
                seen.append(module)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def main(argv: list[str]) -> int:
    import opclass

    made: dict[str, Any] = {}

    def define() -> None:
        class Scale(opclass.CustomOp, name="walk::scale"):
            @staticmethod
            def cpu(x: Tensor, k: float = 2.0) -> Tensor:
                return x * k

            @staticmethod
            def abstract(x: Tensor, k: float = 2.0) -> Tensor:
                return torch.empty_like(x)

            @staticmethod
            def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
                ctx.k = inputs[1]

            @staticmethod
            def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
                return grad * ctx.k, None

        made["op"] = Scale

    def define_with_provider() -> None:
        class Provided(opclass.CustomOp, name="walk::provided"):
            @staticmethod
            def default(x: Tensor, k: float = 2.0) -> Tensor:
                return x * k

            @opclass.provider("cpu")
            @staticmethod
            def fast(x: Tensor, k: float = 2.0) -> Tensor:
                return x * k

        made["provided"] = Provided

    x, w = torch.ones(3), torch.ones(3, requires_grad=True)
    opclass.CustomOp  # noqa: B018 - the package's import is not part of any walk
    opclass.load_plugins()  # nor is the plugins' loading, once per process, before the first definition
    walks = {"class creation": walk(define)}
    op = made["op"]
    walks["first call"] = walk(lambda: op(x))
    walks["call, no grad"] = walk(lambda: op(x))
    walks["call, grad"] = walk(lambda: op(w))
    compiled = torch.compile(lambda t: op(t), backend="aot_eager", fullgraph=True)
    walks["torch.compile, first call"] = walk(lambda: compiled(x))
    walks["torch.compile, later call"] = walk(lambda: compiled(x))
    walks["class creation, an op with a provider"] = walk(define_with_provider)
    print(f"guard: {opclass.guard_info()}")
    for name, modules in walks.items():
        shown = modules if "--all" in argv else list(dict.fromkeys(modules))
        print(f"{name}: {len(modules) - 1} switches, {len(set(modules))} modules: {' -> '.join(shown)}")
    opclass.remove(op)
    opclass.remove(made["provided"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
