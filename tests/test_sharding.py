"""The ``sharding`` hook: DTensor sharding strategies via ``register_sharding``.

* Definition checks, each with its error text.
* What DTensor gets: the wrapper fills in left-out defaults and checks the returned placements.
* Registration and clean-up in DTensor's sharding propagator (removal, redefinition, a failed
  install, a failed redefinition), registration deferred until ``torch.distributed.tensor`` is
  imported (fresh interpreters; also with threads defining ops while another imports it), and
  nothing installed without ``torch.distributed``.
* Plain Tensors: the eager fast path is the same as without the hook, and ``opcheck`` passes.
* The real thing: 2 processes, gloo on localhost, CPU. One launch runs every check in
  ``tests/_sharding_ops.py`` (``CHECKS``) on both ranks; each check is one test here, and the
  ranks must exit cleanly.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest
import torch
import torch.distributed as dist
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp, OpDefinitionError
from opclass.builtin_hooks import sharding as _sharding

from _versions import needs_tag
from opclass.callpath.classcall import call_function

ROOT = Path(__file__).resolve().parent.parent
OPS_FILE = Path(__file__).with_name("_sharding_ops.py")
HAS_GLOO = dist.is_available() and dist.is_gloo_available()
needs_dtensor = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


def _load_ops_module() -> ModuleType:
    name = "_opclass_test_sharding_ops"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, OPS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ops_module = _load_ops_module()


def _propagator() -> Any:
    from torch.distributed.tensor import DTensor

    return DTensor._op_dispatcher.sharding_propagator


# --------------------------------------------------------------------------- definition checks


def test_hook_is_registered() -> None:
    hook = opclass.hooks()["sharding"]
    assert hook.staticmethod and not hook.kernel and not hook.backend and hook.requires == ()
    assert hook.uninstall is not None
    assert hook.doc.startswith("DTensor sharding strategies")


def test_wrong_positional_count(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor, factor: float) -> Tensor:
                return x * factor

            @staticmethod
            def abstract(x: Tensor, factor: float) -> Tensor:
                return torch.empty_like(x)

            @staticmethod
            def sharding(x):  # type: ignore[no-untyped-def]
                return []

    e = info.value
    assert e.hook == "sharding"
    assert e.problem == "takes 1 positional parameters, but the op has 2"
    assert e.fix == "write sharding(x, factor) returning [(output placements, input placements), ...]"
    assert str(e).startswith("Bad.sharding(x): takes 1 positional parameters")
    assert not hasattr(getattr(torch.ops, ns), "bad")


def test_keyword_only_arguments_must_be_keyword_parameters(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
                return x + alpha * y

            @staticmethod
            def abstract(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
                return torch.empty_like(x)

            @staticmethod
            def sharding(x, y=None, *, alpha):  # type: ignore[no-untyped-def]
                return []

    assert info.value.problem == "takes 2 positional parameters, but the op has 1"
    assert info.value.fix == "write sharding(x, *, y, alpha) returning [(output placements, input placements), ...]"

    with pytest.raises(OpDefinitionError) as info:

        class Bad2(CustomOp, name=f"{ns}::bad2"):
            @staticmethod
            def default(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
                return x + alpha * y

            @staticmethod
            def abstract(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
                return torch.empty_like(x)

            @staticmethod
            def sharding(x, *, alpha):  # type: ignore[no-untyped-def]
                return []

    assert info.value.problem == "does not take the op's keyword-only argument(s) y as keyword-only parameters"
    assert info.value.fix == "write sharding(x, *, y, alpha) returning [(output placements, input placements), ...]"


def test_keyword_only_arguments_accepted_forms(ns: str) -> None:
    class Named(CustomOp, name=f"{ns}::named"):
        @staticmethod
        def default(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
            return x + alpha * y

        @staticmethod
        def abstract(x: Tensor, *, y: Tensor, alpha: float = 1.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x, *, y, alpha):  # type: ignore[no-untyped-def]
            return []

    class Starred(Named, name=f"{ns}::starred"):
        @staticmethod
        def sharding(*args, **kwargs):  # type: ignore[no-untyped-def]
            return []

    assert "sharding" in Named.record.hooks and "sharding" in Starred.record.hooks


def test_not_a_static_method(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return 2 * x

            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)

            def sharding(x):  # type: ignore[no-untyped-def, misc]
                return []

    assert info.value.hook == "sharding"
    assert info.value.problem == "hooks are static methods, but this is a plain function"
    assert info.value.fix == "add @staticmethod above the def"


def test_needs_a_fake_kernel(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor, factor: float) -> Tensor:
                return x * factor

            @staticmethod
            def sharding(x, factor):  # type: ignore[no-untyped-def]
                return []

    assert info.value.problem == "DTensor computes the output shapes with the op's fake kernel, and the op has none"
    assert info.value.fix == "define abstract(x, factor) returning empty outputs of the right shape"


@needs_tag("inplace", "out")
def test_generated_fake_kernels_are_enough(ns: str) -> None:
    """Ops returning nothing, in-place and out= ops get a generated fake kernel: no abstract needed."""

    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, value: float) -> None:
            x.fill_(value)

        @staticmethod
        def sharding(x, value):  # type: ignore[no-untyped-def]
            return []

    class Neg_(CustomOp, name=f"{ns}::neg_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x.neg_()

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            return []

    class NegOut(CustomOp, name=f"{ns}::neg.out", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def default(x: Tensor, *, out: Tensor) -> Tensor:
            return torch.neg(x, out=out)

        @staticmethod
        def sharding(x, *, out):  # type: ignore[no-untyped-def]
            return []

    for cls in (Fill, Neg_, NegOut):
        assert "sharding" in cls.record.hooks


def test_did_you_mean_sharding(ns: str) -> None:
    def default(x: Tensor) -> Tensor:
        return 2 * x

    def strategies(x):  # type: ignore[no-untyped-def]
        return []

    for wrong in ("shard", "register_sharding", "shardings"):
        body = {"__module__": __name__, "__qualname__": "Bad", "default": staticmethod(default), wrong: staticmethod(strategies)}
        with pytest.raises(OpDefinitionError) as info:
            type(CustomOp)("Bad", (CustomOp,), body, name=f"{ns}::bad")
        assert info.value.hook == wrong and info.value.problem == "not a hook", wrong
        assert info.value.fix.startswith("did you mean 'sharding'?"), (wrong, info.value.fix)


# --------------------------------------------------------------------------- what DTensor calls


@needs_dtensor
def test_wrapper_passes_every_argument_and_checks_the_result(ns: str) -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard

    seen: list[tuple[Any, ...]] = []

    class Axpy(CustomOp, name=f"{ns}::axpy"):
        @staticmethod
        def default(x: Tensor, a: float = 2.0, *, y: Tensor | None = None, clamp: bool = False) -> Tensor:
            return a * x if y is None else a * x + y

        @staticmethod
        def abstract(x: Tensor, a: float = 2.0, *, y: Tensor | None = None, clamp: bool = False) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x, a, *, y, clamp):  # type: ignore[no-untyped-def]
            seen.append((x, a, y, clamp))
            return result

    wrapped = _sharding._wrap_user_fn(Axpy.record, Axpy.record.hooks["sharding"])
    result: Any = [([Shard(0)], (Shard(0), None, Shard(0), None)), ((Partial(),), [Replicate(), None, None, None])]
    # The dispatcher leaves out arguments equal to their defaults: the user's function gets them all.
    assert wrapped("spec_x") == [([Shard(0)], [Shard(0), None, Shard(0), None]), ([Partial()], [Replicate(), None, None, None])]
    assert wrapped("spec_x", 3.0, clamp=True) and wrapped("spec_x", y="spec_y")
    assert seen == [("spec_x", 2.0, None, False), ("spec_x", 3.0, None, True), ("spec_x", 2.0, "spec_y", False)]

    where = f"{ns}::axpy (Axpy.sharding)"
    for bad, message in [
        ([], f"{where} returned []; return a non-empty list of (output placements, input placements) pairs"),
        ([([Shard(0)],)], f"{where}: entry 0 is ([Shard(dim=0)],), not an (output placements, input placements) pair"),
        (
            [([Shard(0), Shard(0)], [Shard(0), None, None, None])],
            f"{where}: entry 0 gives output placements [Shard(dim=0), Shard(dim=0)], but the op has 1 output(s); give a list with one placement per output",
        ),
        (
            [([Shard(0)], [Shard(0), None])],
            f"{where}: entry 0 gives input placements [Shard(dim=0), None], but this call has 4 input(s) (x, a, y, clamp); give a list "
            "with one placement per argument (None for a non-Tensor, one per element for a list of Tensors)",
        ),
        ([([0], [Shard(0), None, None, None])], f"{where}: entry 0: 0 is not a placement (Shard(dim), Replicate(), Partial()) or None"),
    ]:
        result = bad
        with pytest.raises(TypeError) as info:
            wrapped("spec_x")
        assert str(info.value) == message


@needs_dtensor
def test_wrapper_fills_in_python_defaults(ns: str) -> None:
    """Left-out defaults arrive as the kernels get them (the schema says 7 for torch.float64)."""
    from torch.distributed.tensor import Replicate

    seen: list[tuple[Any, ...]] = []

    class Cast(CustomOp, name=f"{ns}::cast"):
        @staticmethod
        def default(x: Tensor, dtype: torch.dtype = torch.float64, *, mode: str = "round") -> Tensor:
            return x.to(dtype)

        @staticmethod
        def abstract(x: Tensor, dtype: torch.dtype = torch.float64, *, mode: str = "round") -> Tensor:
            return x.new_empty(x.shape, dtype=dtype)

        @staticmethod
        def sharding(x, dtype, *, mode):  # type: ignore[no-untyped-def]
            seen.append((dtype, mode))
            return [([Replicate()], [Replicate(), None, None])]

    wrapped = _sharding._wrap_user_fn(Cast.record, Cast.record.hooks["sharding"])
    wrapped("spec_x")
    wrapped("spec_x", torch.float16, mode="floor")
    assert seen == [(torch.float64, "round"), (torch.float16, "floor")]


@needs_dtensor
def test_tensor_list_takes_one_placement_per_element(ns: str) -> None:
    from torch.distributed.tensor import Replicate

    class Total(CustomOp, name=f"{ns}::total"):
        @staticmethod
        def default(xs: list[Tensor], w: float) -> Tensor:
            return sum(xs) * w  # type: ignore[return-value]

        @staticmethod
        def abstract(xs: list[Tensor], w: float) -> Tensor:
            return torch.empty_like(xs[0])

        @staticmethod
        def sharding(xs, w):  # type: ignore[no-untyped-def]
            return [([Replicate()], [Replicate()] * len(xs) + [None])]

    wrapped = _sharding._wrap_user_fn(Total.record, Total.record.hooks["sharding"])
    assert wrapped(("a", "b", "c"), 1.0) == [([Replicate()], [Replicate(), Replicate(), Replicate(), None])]


# --------------------------------------------------------------------------- registration and clean-up


@needs_dtensor
def test_registered_and_removed(ns: str) -> None:
    ops = ops_module.define_ops(ns)
    propagator = _propagator()
    scale, add_scaled = ops.Scale.op, ops.AddScaled.op
    for op in (scale, add_scaled, ops.ColumnSum.op, ops.Cumsum.op, ops.RowMinMax.op, ops.AddInto.op, ops.WeightedTotal.op):
        assert op in propagator.op_strategy_funcs and op in propagator.op_to_schema_info, op
    # Every argument is part of DTensor's cache key: non-Tensor positional ones from the first on,
    # keyword-only ones (Tensors too) by name.
    assert propagator.op_to_schema_info[add_scaled].static_kwargkey == ["y", "alpha"]
    assert propagator.op_to_schema_info[scale].static_kwargkey is None
    assert propagator.op_to_schema_info[scale].static_argnum == 1  # (x, factor): factor on
    opclass.remove(ops.Scale)
    assert scale not in propagator.op_strategy_funcs and scale not in propagator.op_to_schema_info
    assert add_scaled in propagator.op_strategy_funcs
    opclass.remove_namespace(ns)
    assert not [op for op in propagator.op_strategy_funcs if str(op).startswith(f"{ns}.")]
    assert not [op for op in propagator.op_to_schema_info if str(op).startswith(f"{ns}.")]
    assert not [r for r in _sharding._REGISTERED if r.namespace == ns]


@needs_dtensor
def test_redefinition_replaces_the_strategy(ns: str) -> None:
    from torch.distributed.tensor import Replicate

    def define(placements: list[Any], schema: str = "(Tensor x) -> Tensor") -> Any:
        k = "(Tensor x, int k=2)" in schema
        hooks = {
            "default": (lambda x, k=2: k * x) if k else (lambda x: 2 * x),
            "abstract": (lambda x, k=2: torch.empty_like(x)) if k else (lambda x: torch.empty_like(x)),
            "sharding": (lambda x, k=2: [(placements, placements)]) if k else (lambda x: [(placements, placements)]),
        }
        return type("Twice", (CustomOp,), {n: staticmethod(f) for n, f in hooks.items()}, name=f"{ns}::twice", schema=schema)

    propagator = _propagator()
    first = define([Replicate()])
    old_op, old_strategy = first.op, propagator.op_strategy_funcs[first.op]
    # The same registrations: installed in place, the same OpOverload, its strategy replaced.
    second = define([Replicate()])
    assert second.op is old_op
    assert propagator.op_strategy_funcs[second.op] is not old_strategy
    assert [r.op for r in _sharding._REGISTERED if r.namespace == ns] == [second.op]
    assert _sharding._REGISTERED[second.record] == (second.op, propagator.op_strategy_funcs[second.op])
    # Another schema: a fresh OpOverload; the old one's strategy is gone.
    third = define([Replicate()], "(Tensor x, int k=2) -> Tensor")
    assert third.op is not old_op
    assert old_op not in propagator.op_strategy_funcs and old_op not in propagator.op_to_schema_info
    assert [r.op for r in _sharding._REGISTERED if r.namespace == ns] == [third.op]
    assert _sharding._REGISTERED[third.record] == (third.op, propagator.op_strategy_funcs[third.op])


@needs_dtensor
def test_failed_install_takes_the_strategy_out(ns: str) -> None:
    """A hook installed after ``sharding`` fails: the half-installed op's strategy goes, and a
    failed redefinition puts the previous op back with its strategy."""

    def boom(record: Any, value: Any) -> None:
        raise RuntimeError("boom")

    def define(name: str, fail: bool) -> Any:
        class Twice(CustomOp, name=f"{ns}::{name}"):
            if fail:
                t_sharding_boom = True

            @staticmethod
            def default(x: Tensor) -> Tensor:
                return 2 * x

            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)

            @staticmethod
            def sharding(x):  # type: ignore[no-untyped-def]
                return []

        return Twice

    propagator = _propagator()
    opclass.register_hook(opclass.Hook("t_sharding_boom", boom, staticmethod=False))
    try:
        with pytest.raises(RuntimeError, match="boom"):
            define("bad", fail=True)
        assert not [op for op in propagator.op_strategy_funcs if str(op).startswith(f"{ns}.")]
        good = define("twice", fail=False)
        with pytest.raises(RuntimeError, match="boom"):
            define("twice", fail=True)
    finally:
        opclass.unregister_hook("t_sharding_boom")
    assert [str(op) for op in propagator.op_strategy_funcs if str(op).startswith(f"{ns}.")] == [f"{ns}.twice.default"]
    assert good.op in propagator.op_strategy_funcs  # the restored op (a new OpOverload) has its strategy
    assert [r.qualname for r in _sharding._REGISTERED if r.namespace == ns] == [f"{ns}::twice"]


@pytest.mark.slow
@needs_dtensor
def test_registration_waits_for_dtensor_import() -> None:
    """Defining an op imports neither torch.distributed.tensor nor torch._dynamo (fresh interpreter)."""
    code = """if True:
        import json, sys, time
        import torch, opclass
        from opclass.builtin_hooks import sharding as _sharding
        from opclass.core import after_import as _after_import
        from torch import Tensor

        t = time.perf_counter()
        class Scale(opclass.CustomOp, name="t_sharding_lazy::scale"):
            @staticmethod
            def default(x: Tensor, factor: float) -> Tensor:
                return x * factor
            @staticmethod
            def abstract(x: Tensor, factor: float) -> Tensor:
                return torch.empty_like(x)
            @staticmethod
            def sharding(x, factor):
                return []
        define_s = time.perf_counter() - t
        class Gone(Scale, name="t_sharding_lazy::gone"):
            pass
        gone = Gone.op
        opclass.remove(Gone)
        before = {
            "dtensor": "torch.distributed.tensor" in sys.modules,
            "dynamo": "torch._dynamo" in sys.modules,
            "pending": sorted(r.qualname for r in _sharding._PENDING),
            "watching": "torch.distributed.tensor" in _after_import._WAITING,
        }
        import torch.distributed.tensor
        from torch.distributed.tensor import DTensor
        table = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
        after = {
            "scale": Scale.op in table,
            "gone": gone in table,
            "pending": len(_sharding._PENDING),
            "watching": "torch.distributed.tensor" in _after_import._WAITING,
            "loader_restored": "exec_module" not in vars(torch.distributed.tensor.__loader__),
        }
        print(json.dumps({"before": before, "after": after, "define_s": define_s}))
    """
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["before"] == {"dtensor": False, "dynamo": False, "pending": ["t_sharding_lazy::scale"], "watching": True}
    assert report["after"] == {"scale": True, "gone": False, "pending": 0, "watching": False, "loader_restored": True}
    assert report["define_s"] < 0.25, report  # no half-second DTensor import in the class statement


@pytest.mark.slow
@needs_dtensor
def test_definitions_racing_the_dtensor_import() -> None:
    """8 threads define ops while another imports torch.distributed.tensor: all get registered."""
    code = """if True:
        import json, sys, threading
        import torch, opclass
        from opclass.builtin_hooks import sharding as _sharding
        from opclass.core import after_import as _after_import
        from torch import Tensor

        def define(i):
            class Op(opclass.CustomOp, name=f"t_sharding_race::op{i}"):
                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return 2 * x
                @staticmethod
                def abstract(x: Tensor) -> Tensor:
                    return torch.empty_like(x)
                @staticmethod
                def sharding(x):
                    return []
            return Op

        classes, errors = [], []
        start = threading.Barrier(9)
        def definer(i):
            start.wait()
            try:
                for j in range(20):
                    classes.append(define(100 * i + j))
            except BaseException as e:
                errors.append(repr(e))
        def importer():
            start.wait()
            try:
                import torch.distributed.tensor
            except BaseException as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=definer, args=(i,)) for i in range(8)] + [threading.Thread(target=importer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        from torch.distributed.tensor import DTensor
        table = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
        print(json.dumps({"errors": errors, "defined": len(classes), "registered": sum(c.op in table for c in classes),
                          "pending": len(_sharding._PENDING), "watching": "torch.distributed.tensor" in _after_import._WAITING}))
    """
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"errors": [], "defined": 160, "registered": 160, "pending": 0, "watching": False}, proc.stderr[-4000:]


def test_nothing_installed_without_torch_distributed(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)

    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 2 * x

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def sharding(x):  # type: ignore[no-untyped-def]
            return []

    assert Scale.record not in _sharding._PENDING and Scale.record not in _sharding._REGISTERED
    assert torch.equal(Scale(torch.ones(2)), torch.full((2,), 2.0))
    opclass.remove(Scale)  # the uninstall has nothing to undo


# --------------------------------------------------------------------------- plain Tensors


def test_fast_path_is_unchanged(ns: str) -> None:
    """The generated eager call is the same with or without a sharding hook."""
    ops = ops_module.define_ops(ns)

    class Plain(CustomOp, name=f"{ns}::plain"):
        @staticmethod
        def default(x: Tensor, factor: float = 2.0) -> Tensor:
            return x * factor

        @staticmethod
        def abstract(x: Tensor, factor: float = 2.0) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            ctx.factor = inputs[1]

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad * ctx.factor, None

    source = inspect.getsource(call_function(ops.Scale))
    assert source == inspect.getsource(call_function(Plain)).replace("def Plain(", "def Scale(")
    assert "_u_cpu(x, factor)" in source  # plain CPU Tensors call the kernel directly
    x = torch.randn(3, 4)
    ops.calls.clear()
    torch.testing.assert_close(ops.Scale(x, 0.5), x * 0.5)
    assert ops.calls == [("scale", (3, 4))]
    x.requires_grad_()
    opclass.testing.check_op(ops.Scale, [(x,), (x, -1.0), (torch.randn(()), 3.0)], opcheck=False)


def _opcheck_samples(ops: Any) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    samples = [
        (ops.Scale, (x,), {}),
        (ops.Scale, (x, 2.5), {}),
        (ops.ColumnSum, (x,), {}),
        (ops.Cumsum, (x,), {}),
        (ops.RowMinMax, (x,), {}),
        (ops.AddInto, (x.clone(), y), {}),
        (ops.AddScaled, (x,), {"y": y, "alpha": 3.0}),
        (ops.WeightedTotal, ([x, y], 0.5), {}),
        (ops.Neg_, (x.clone(),), {}),
        (ops.NegOut, (x,), {"out": torch.empty(4, 6)}),
    ]
    return [s for s in samples if s[0] is not None]  # torch 2.11/2.12 define no Neg_/NegOut (no Tag.inplace/Tag.out)


def test_opcheck_on_plain_tensors(ns: str) -> None:
    ops = ops_module.define_ops(ns)
    for cls, args, kwargs in _opcheck_samples(ops):
        result = torch.library.opcheck(cls.op, args, kwargs)
        assert set(result.values()) == {"SUCCESS"}, (cls.qualname, result)


# --------------------------------------------------------------------------- two processes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _launch(tmp: Path, timeout: float) -> list[dict[str, Any]]:
    """Run both ranks; per rank: returncode, stdout, stderr and the parsed results by check."""
    port = _free_port()
    files = [(tmp / f"rank{r}.out", tmp / f"rank{r}.err") for r in range(2)]
    procs = []
    # The checkout's opclass, as in this process, not whichever one the environment has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    for rank, (out, err) in enumerate(files):
        with open(out, "w") as fo, open(err, "w") as fe:  # files, not pipes: a full pipe cannot stall a rank
            procs.append(subprocess.Popen([sys.executable, "-X", "faulthandler", str(OPS_FILE), str(rank), "2", str(port)], stdout=fo, stderr=fe, cwd=ROOT, env=env))
    deadline = time.monotonic() + timeout
    timed_out = False
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        for proc in procs:
            proc.kill()
            proc.wait()
    ranks = []
    for proc, (out, err) in zip(procs, files):
        stdout, stderr = out.read_text(), err.read_text()
        results = {}
        for line in stdout.splitlines():
            if line.startswith("RESULT "):
                result = json.loads(line[len("RESULT "):])
                results[result["check"]] = result
        ranks.append({"rc": "timed out" if timed_out else proc.returncode, "stdout": stdout, "stderr": stderr, "results": results})
    return ranks


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    if not HAS_GLOO:
        pytest.skip("torch.distributed with the gloo backend is not available")
    started = time.perf_counter()
    ranks = _launch(tmp_path_factory.mktemp("sharding"), timeout=180)
    if any("EADDRINUSE" in r["stderr"] or "Address already in use" in r["stderr"] for r in ranks):
        ranks = _launch(tmp_path_factory.mktemp("sharding_retry"), timeout=180)  # the free port was taken meanwhile
    print(f"two gloo ranks ran {len(ops_module.CHECKS)} checks in {time.perf_counter() - started:.1f} s")
    yield ranks


@pytest.mark.slow
@pytest.mark.parametrize("check", [pytest.param(c, marks=needs_tag(*ops_module.CHECK_TAGS.get(c, ()))) for c in ops_module.CHECKS])
def test_two_processes(two_ranks: list[dict[str, Any]], check: str) -> None:
    for rank, r in enumerate(two_ranks):
        result = r["results"].get(check)
        if result is None:
            pytest.fail(
                f"rank {rank} reported nothing for {check} (exit status {r['rc']})\n"
                f"--- stdout\n{r['stdout'][-4000:]}\n--- stderr\n{r['stderr'][-8000:]}"
            )
        assert result["ok"], f"rank {rank} failed {check}:\n{result['error']}"


@pytest.mark.slow
def test_two_processes_finished_cleanly(two_ranks: list[dict[str, Any]]) -> None:
    for rank, r in enumerate(two_ranks):
        assert r["rc"] == 0 and r["stdout"].rstrip().endswith("DONE"), (
            f"rank {rank} exit status {r['rc']}\n--- stdout\n{r['stdout'][-4000:]}\n--- stderr\n{r['stderr'][-8000:]}"
        )

