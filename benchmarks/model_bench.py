"""What a model step costs, not one call: the decoder of ``examples/decoder_block.py``, step by step.

One eager inference step (``model(tokens)`` under ``torch.inference_mode``), one eager training
step (forward, loss, backward; the optimizer is left out, it is the same for every version) and
the same two steps compiled (``torch.compile(fullgraph=True)``), at sizes where per-call overhead
matters (batch 1, a short sequence: LLM decoding is such a case). The versions (``impl``):

- ``plain``: the ops as plain functions, differentiated by torch's autograd;
- ``custom_op``: ``torch.library.custom_op`` ops with the example's fake kernels and formulas;
- ``autograd.Function``: the example's kernels and formulas in ``torch.autograd.Function``s, no
  dispatcher: the floor for an op whose backward is Python;
- ``opclass``: the example's op classes (fake kernels and formulas);
- ``opclass eager_autograd``: the same kernels with ``eager_autograd = True`` instead of
  formulas: eager autograd differentiates through the kernel (torch ops), compiled graphs still
  see one node per op. Eager steps only;
- ``opclass traceable``: the op classes with ``traceable = True``: torch.compile traces into the
  kernels (torch ops), so inductor fuses them as it fuses plain functions. Compiled steps only.

Each figure is the median over ``rounds`` rounds that take the versions in turn (so that a slow
moment of the machine falls on all of them), each round's figure the median of
``torch.utils.benchmark.Timer.blocked_autorange``. Every version's loss is checked against the
plain one's before anything is timed.

Run it as ``python -m benchmarks --model`` (with the other tables' options: ``--guard both``,
``--runs``).
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils.benchmark as tbench
from torch import Tensor

from opclass import CustomOp

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "decoder_block.py"
#: Rows of the eager steps; the compiled steps take the versions a user compares.
IMPLS = ("plain", "custom_op", "autograd.Function", "opclass", "opclass eager_autograd")
COMPILED_IMPLS = ("plain", "custom_op", "opclass", "opclass traceable")


def example() -> types.ModuleType:
    """``examples/decoder_block.py``, imported once per process (its custom_ops cannot be defined twice)."""
    module = sys.modules.get("decoder_block")
    if module is None:
        spec = importlib.util.spec_from_file_location("decoder_block", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["decoder_block"] = module
        spec.loader.exec_module(module)
    return module


def _function(op_cls: Any) -> Callable[..., Tensor]:
    """``op_cls``'s kernel and formula as a ``torch.autograd.Function``, called through its C ``apply``."""

    def forward(ctx: Any, *args: Any) -> Tensor:
        out: Tensor = op_cls.default(*args)
        op_cls.setup_context(ctx, args, out)
        return out

    def backward(ctx: Any, *grads: Tensor) -> Any:
        return op_cls.backward(ctx, *grads)

    fn = type(f"{op_cls.__name__}Function", (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    apply: Callable[..., Tensor] = torch._C._FunctionBase.__dict__["apply"].__get__(None, fn)
    return apply


def _variant(op_cls: Any, hooks: tuple[str, ...], **attributes: Any) -> Any:
    """A new op class (namespace ``bench_model``) with ``op_cls``'s ``hooks`` and ``attributes``."""
    body: dict[str, Any] = {hook: staticmethod(getattr(op_cls, hook)) for hook in hooks}
    body.update(attributes)
    name = op_cls.qualname.split("::")[1] + "_" + "_".join(attributes)
    return types.new_class(f"{op_cls.__name__}Variant", (CustomOp,), {"name": f"bench_model::{name}"}, lambda ns: ns.update(body))


_VERSIONS: dict[str, Any] = {}


def versions() -> dict[str, Any]:
    """The ``Ops`` table of each version (``IMPLS``), made once per process."""
    if not _VERSIONS:
        ex = example()
        _VERSIONS.update(
            {
                "plain": ex.PLAIN,
                "custom_op": ex.CUSTOM_OP,
                "autograd.Function": ex.Ops(*map(_function, ex.OP_CLASSES)),
                "opclass": ex.OPCLASS,
                "opclass eager_autograd": ex.Ops(*(_variant(c, ("default", "abstract"), eager_autograd=True) for c in ex.OP_CLASSES)),
                "opclass traceable": ex.Ops(*(_variant(c, ("default", "abstract", "setup_context", "backward"), traceable=True) for c in ex.OP_CLASSES)),
            }
        )
    return _VERSIONS


def _median_us(stmt: Callable[[], Any], min_run_time: float) -> float:
    timer = tbench.Timer(stmt="stmt()", globals={"stmt": stmt})
    return float(timer.blocked_autorange(min_run_time=min_run_time).median) * 1e6


def run_model(
    min_run_time: float = 1.0, backend: str = "inductor", device: str = "cpu", batch: int = 1, seq: int = 8, rounds: int = 5
) -> dict[str, Any]:
    """Time each step of each version; ``{"batch", "seq", "backend", "rows": [{step, mode, impl, us}]}``.

    ``backend``: the compiled steps' ``torch.compile`` backend; ``""`` leaves them out.
    ``min_run_time`` is spent on each figure, spread over the rounds.

    Example:
        >>> result = run_model(min_run_time=0.01, backend="", rounds=1)  # doctest: +SKIP
        >>> sorted({r["impl"] for r in result["rows"]}) == sorted(IMPLS)  # doctest: +SKIP
        True
    """
    ex = example()
    ops = versions()
    config = ex.Config()
    models = {name: model.to(device) for name, model in ex.models(config, versions=ops).items()}
    torch.manual_seed(1)
    tokens = torch.randint(0, config.vocab, (batch, seq + 1), device=device)
    inputs = tokens[:, :-1]
    expected = ex.loss_of(models["plain"], tokens)
    steps: dict[tuple[str, str, str], Callable[[], Any]] = {}
    for impl in IMPLS:
        model = models[impl]
        torch.testing.assert_close(ex.loss_of(model, tokens), expected, rtol=1e-4, atol=1e-5)
        steps[("infer", "eager", impl)] = _infer(model, inputs)
        steps[("train", "eager", impl)] = _train(model, functools.partial(ex.loss_of, model, tokens))
    if backend:
        for impl in COMPILED_IMPLS:
            model = models[impl]
            compiled: Callable[[Tensor], Tensor] = torch.compile(model, fullgraph=True, backend=backend)
            compiled_loss = torch.compile(functools.partial(ex.loss_of, model, tokens), fullgraph=True, backend=backend)
            with torch.inference_mode():
                torch.testing.assert_close(compiled(inputs), model(inputs), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(compiled_loss(), expected, rtol=1e-4, atol=1e-5)
            steps[("infer", "compiled", impl)] = _infer(compiled, inputs)
            steps[("train", "compiled", impl)] = _train(model, compiled_loss)
    per_round = max(min_run_time / rounds, 1e-3)
    figures: dict[tuple[str, str, str], list[float]] = {key: [] for key in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            figures[key].append(_median_us(step, per_round))
    order = sorted(figures, key=lambda k: (k[1] != "eager", k[0] != "infer"))
    rows = [{"step": s, "mode": m, "impl": i, "us": statistics.median(figures[(s, m, i)])} for s, m, i in order]
    return {"batch": batch, "seq": seq, "backend": backend, "rows": rows}


def _infer(model: Callable[[Tensor], Tensor], inputs: Tensor) -> Callable[[], Any]:
    def step() -> Any:
        with torch.inference_mode():
            return model(inputs)

    return step


def _train(model: torch.nn.Module, loss: Callable[[], Tensor]) -> Callable[[], Any]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss().backward()

    return step
