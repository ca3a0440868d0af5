"""The example scripts: each runs as a script, and every op they define passes PyTorch's own checks.

For every example op: ``torch.library.opcheck`` (all four default test utils), ``gradcheck`` where
the op has a backward, ``torch.compile(fullgraph=True, backend="aot_eager")`` matching eager, and
``torch.export.export`` of a small module whose graph calls the op exactly once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
import torch
from torch import Tensor

from _versions import missing_opaque_values, missing_tags, tags_in

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _unavailable(path: Path) -> str | None:
    """Why an example cannot run on this torch (torch 2.11, 2.12: no Tag.inplace/Tag.out; 2.11: no config objects)."""
    if path.stem == "config_object":
        return missing_opaque_values()
    return missing_tags(*tags_in(path.read_text(encoding="utf-8")))


UNAVAILABLE = {p.stem: _unavailable(p) for p in EXAMPLES.glob("*.py")}


def _runs_here(stem: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(UNAVAILABLE[stem] is not None, reason=UNAVAILABLE[stem] or "")



def _load(stem: str) -> ModuleType:
    """Import ``examples/<stem>.py`` once per test session (examples/ is not a package)."""
    name = f"opclass_examples_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# The example modules, imported once; the functions below call the op classes directly.
numpy_sin = _load("numpy_sin")
mutable_ops = None if UNAVAILABLE["mutable_ops"] else _load("mutable_ops")
list_inputs = _load("list_inputs")
factory = _load("factory")
data_dependent = _load("data_dependent")
vmap_rule = _load("vmap_rule")
variants = _load("variants")
config_object = None if UNAVAILABLE["config_object"] else _load("config_object")
dtensor_sharding = _load("dtensor_sharding")
testing_ops = _load("testing_ops")
eager_autograd = _load("eager_autograd")
triton_add = _load("triton_add")
decoder_block = _load("decoder_block")
providers_example = _load("providers")
out_variants = _load("out_variants")
NumpySin = numpy_sin.NumpySin
if mutable_ops is not None:
    AddInto, Sin_, SinOut = mutable_ops.AddInto, mutable_ops.Sin_, mutable_ops.SinOut
WeightedSum = list_inputs.WeightedSum
NumpyEye = factory.NumpyEye
NumpyNonzero = data_dependent.NumpyNonzero
NumpyMul = vmap_rule.NumpyMul
SoftplusNumpy, SoftplusTorch = variants.SoftplusNumpy, variants.SoftplusTorch
if config_object is not None:
    FakeQuant, QuantConfig = config_object.FakeQuant, config_object.QuantConfig
ShardedScale, ColumnSum = dtensor_sharding.Scale, dtensor_sharding.ColumnSum
SoftClip = eager_autograd.SoftClip
TritonAdd = triton_add.TritonAdd
RMSNorm, Rotary, SwiGLU, Attention = decoder_block.RMSNorm, decoder_block.Rotary, decoder_block.SwiGLU, decoder_block.Attention
ProvidedRMSNorm = providers_example.RMSNorm
OutRmsNorm = out_variants.RmsNorm


# --------------------------------------------------------------------------- running the scripts


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(p.name, marks=_runs_here(p.stem)) for p in sorted(EXAMPLES.glob("*.py"))])
def test_example_script_runs(script: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.stdout.strip(), f"{script} printed nothing"


def test_examples_have_docstring_and_main() -> None:
    for module in (numpy_sin, mutable_ops, list_inputs, factory, data_dependent, vmap_rule, variants, testing_ops, eager_autograd, triton_add, decoder_block, out_variants):
        if module is None:
            continue  # needs what this torch lacks
        stem = module.__name__
        assert module.__doc__ and module.__doc__.strip(), stem
        assert callable(getattr(module, "main", None)), stem


# --------------------------------------------------------------------------- per-op specs


def _r(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(shape, dtype=dtype, requires_grad=True)


@dataclasses.dataclass
class Case:
    """How to exercise one example op.

    ``samples()``: ``[(args, kwargs), ...]`` for opcheck. ``grad_inputs()``: double inputs for
    gradcheck of ``grad_fn`` (``None``: the op has no backward). ``compile_fn(*inputs)`` calls the
    op class directly and returns everything to compare (mutated inputs included); ``inputs()``
    makes fresh inputs for it. Export wraps ``compile_fn`` in an ``nn.Module``.
    """

    id: str
    stem: str
    cls_name: str
    samples: Callable[[], list[tuple[tuple[Any, ...], dict[str, Any]]]]
    inputs: Callable[[], tuple[Any, ...]]
    compile_fn: Callable[..., Any]
    grad_inputs: Callable[[], tuple[Tensor, ...]] | None = None
    grad_fn: Callable[..., Any] | None = None

    @property
    def cls(self) -> Any:
        # A dotted name reaches an overload's class: "RmsNorm.out" is RmsNorm's .out overload.
        found: Any = _load(self.stem)
        for part in self.cls_name.split("."):
            found = getattr(found, part)
        return found


def _numpy_sin_fn(x: Tensor) -> Tensor:
    return NumpySin(x) * 2


def _add_into_fn(dst: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    AddInto(dst, src)
    return dst * 2, dst


def _sin__fn(x: Tensor) -> tuple[Tensor, Tensor]:
    y = Sin_(x) + 1
    return y, x


def _sin_out_fn(x: Tensor, out: Tensor) -> tuple[Tensor, Tensor]:
    y = SinOut(x, out=out)
    return y * 1, out


def _weighted_sum_fn(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    return WeightedSum([a, b, c], [1.0, -2.0, 0.5])


def _eye_fn(x: Tensor) -> Tensor:
    return x + NumpyEye(x.shape[0], x.dtype, x.device)


def _nonzero_fn(x: Tensor) -> Tensor:
    return NumpyNonzero(x) + 1


def _mul_fn(x: Tensor, y: Tensor) -> Tensor:
    return NumpyMul(x, y)


def _soft_clip_fn(x: Tensor) -> Tensor:
    return SoftClip(x, 2.0) * 2


def _triton_add_fn(x: Tensor, y: Tensor) -> Tensor:
    return TritonAdd(x, y) * 2


def _softplus_numpy_fn(x: Tensor) -> Tensor:
    return SoftplusNumpy(x)


def _softplus_torch_fn(x: Tensor) -> Tensor:
    return SoftplusTorch(x)


def _fake_quant_fn(x: Tensor) -> Tensor:
    return FakeQuant(x, QuantConfig(bits=4, scale=0.25)) * 2


def _sharded_scale_fn(x: Tensor) -> Tensor:
    return ShardedScale(x, 0.5) + 1


def _column_sum_fn(x: Tensor) -> Tensor:
    return ColumnSum(x) * 2


def _rms_norm_fn(x: Tensor, w: Tensor) -> Tensor:
    return RMSNorm(x, w, 1e-5) * 2


def _provided_rms_norm_fn(x: Tensor, w: Tensor) -> Tensor:
    return ProvidedRMSNorm(x, w) * 2


def _rotary_fn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return Rotary(x, cos, sin) + 1


def _swiglu_fn(gate: Tensor, up: Tensor) -> Tensor:
    return SwiGLU(gate, up) * 2


def _attention_fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return Attention(q, k, v) + 1


def _out_rms_norm_fn(x: Tensor, w: Tensor) -> Tensor:
    return OutRmsNorm(x, w, 1e-5) * 2


def _out_rms_norm_out_fn(x: Tensor, w: Tensor, buf: Tensor) -> tuple[Tensor, Tensor]:
    # The class call with out=: the .out overload, the caller's buffer written and returned.
    y = OutRmsNorm(x, w, 1e-5, out=buf)
    return y * 1, buf


def _out_rms_norm_inplace_fn(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    y = OutRmsNorm.inplace(x, w, 1e-5) + 1
    return y, x


def _heads(*shape: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """(batch, heads, sequence, head_dim) as the model makes them: a strided view of a projection."""
    b, h, s, d = shape
    return torch.randn(b, s, 3, h, d, dtype=dtype).permute(2, 0, 3, 1, 4)[1].requires_grad_()


def _nonzero_input() -> Tensor:
    return torch.tensor([[0.0, 1.5, 0.0, -2.0], [3.0, 0.0, 0.0, 4.0], [0.0, 0.0, 0.0, 0.0]])


CASES = [
    Case(
        "providers_rms_norm", "providers", "RMSNorm",
        samples=lambda: [((_r(4, 16), _r(16)), {}), ((_r(3, 8, dtype=torch.double), _r(8, dtype=torch.double)), {}), ((torch.randn(16, 4).t(), _r(16)), {})],
        inputs=lambda: (_r(4, 16), _r(16)),
        compile_fn=_provided_rms_norm_fn,
        grad_inputs=lambda: (_r(3, 8, dtype=torch.double), _r(8, dtype=torch.double)),
        grad_fn=ProvidedRMSNorm,
    ),
    Case(
        "numpy_sin", "numpy_sin", "NumpySin",
        samples=lambda: [((_r(3, 4),), {}), ((torch.randn(4, 3).t(),), {}), ((torch.randn(()),), {})],
        inputs=lambda: (_r(3, 4),),
        compile_fn=_numpy_sin_fn,
        grad_inputs=lambda: (_r(3, 4, dtype=torch.double),),
        grad_fn=NumpySin,
    ),
    Case(
        "add_into", "mutable_ops", "AddInto",
        samples=lambda: [((torch.zeros(3), torch.randn(3)), {}), ((torch.randn(2, 3), torch.randn(2, 3)), {})],
        inputs=lambda: (torch.zeros(3), torch.randn(3)),
        compile_fn=_add_into_fn,
    ),
    Case(
        "sin_", "mutable_ops", "Sin_",
        samples=lambda: [((torch.randn(3),), {}), ((torch.randn(2, 5),), {})],
        inputs=lambda: (torch.randn(4),),
        compile_fn=_sin__fn,
    ),
    Case(
        "sin_out", "mutable_ops", "SinOut",
        samples=lambda: [((torch.randn(3),), {"out": torch.empty(3)}), ((torch.randn(2, 2),), {"out": torch.empty(2, 2)})],
        inputs=lambda: (torch.randn(4), torch.empty(4)),
        compile_fn=_sin_out_fn,
    ),
    Case(
        "weighted_sum", "list_inputs", "WeightedSum",
        samples=lambda: [(([_r(3) for _ in range(3)], [1.0, -2.0, 0.5]), {}), (([_r(2, 2)], [3.0]), {}), (([_r(), _r()], [1.0, 2.0]), {})],
        inputs=lambda: (_r(3), _r(3), _r(3)),
        compile_fn=_weighted_sum_fn,
        grad_inputs=lambda: (_r(3, dtype=torch.double), _r(3, dtype=torch.double), _r(3, dtype=torch.double)),
        grad_fn=_weighted_sum_fn,
    ),
    Case(
        "numpy_eye", "factory", "NumpyEye",
        samples=lambda: [((3, torch.float32, torch.device("cpu")), {}), ((1, torch.float64, torch.device("cpu")), {})],
        inputs=lambda: (torch.randn(4, 4),),
        compile_fn=_eye_fn,
    ),
    Case(
        "numpy_nonzero", "data_dependent", "NumpyNonzero",
        samples=lambda: [((_nonzero_input(),), {}), ((torch.zeros(5),), {}), ((torch.ones(2, 2, 2),), {})],
        inputs=lambda: (_nonzero_input(),),
        compile_fn=_nonzero_fn,
    ),
    Case(
        "numpy_mul", "vmap_rule", "NumpyMul",
        samples=lambda: [((_r(3, 4), _r(4)), {}), ((_r(2, 3), torch.randn(2, 3)), {}), ((_r(), _r()), {})],
        inputs=lambda: (_r(3, 4), _r(4)),
        compile_fn=_mul_fn,
        grad_inputs=lambda: (_r(3, 4, dtype=torch.double), _r(4, dtype=torch.double)),
        grad_fn=_mul_fn,
    ),
    Case(
        "fake_quant", "config_object", "FakeQuant",
        samples=lambda: [((torch.randn(3, 4), QuantConfig(4, 0.25)), {}), ((torch.randn(5) * 3, QuantConfig()), {}), ((torch.randn(()), QuantConfig(2, 1.0)), {})],
        inputs=lambda: (torch.randn(3, 4),),
        compile_fn=_fake_quant_fn,
    ),
    Case(
        "sharded_scale", "dtensor_sharding", "Scale",
        samples=lambda: [((torch.randn(4, 6), 0.5), {}), ((torch.randn(3), -2.0), {}), ((torch.randn(()), 1.0), {})],
        inputs=lambda: (torch.randn(4, 6),),
        compile_fn=_sharded_scale_fn,
    ),
    Case(
        "column_sum", "dtensor_sharding", "ColumnSum",
        samples=lambda: [((torch.randn(4, 6),), {}), ((torch.randn(1, 3),), {})],
        inputs=lambda: (torch.randn(4, 6),),
        compile_fn=_column_sum_fn,
    ),
    Case(
        "soft_clip", "eager_autograd", "SoftClip",
        samples=lambda: [((_r(3, 4), 2.0), {}), ((torch.randn(5) * 2e4,), {}), ((_r(),), {})],
        inputs=lambda: (_r(3, 4),),
        compile_fn=_soft_clip_fn,
        grad_inputs=lambda: (_r(2, 5, dtype=torch.double),),
        grad_fn=_soft_clip_fn,
    ),
    Case(
        "triton_add", "triton_add", "TritonAdd",
        samples=lambda: [((torch.randn(3, 4), torch.randn(3, 4)), {}), ((torch.randn(()), torch.randn(())), {})],
        inputs=lambda: (torch.randn(3, 4), torch.randn(3, 4)),
        compile_fn=_triton_add_fn,
    ),
    Case(
        "rms_norm", "decoder_block", "RMSNorm",
        samples=lambda: [((_r(2, 3, 8), _r(8), 1e-6), {}), ((_r(5, 4), torch.ones(4)), {}), ((_r(4, 6).t(), _r(4), 0.1), {})],
        inputs=lambda: (_r(2, 3, 8), _r(8)),
        compile_fn=_rms_norm_fn,
        grad_inputs=lambda: (_r(2, 3, 8, dtype=torch.double), _r(8, dtype=torch.double)),
        grad_fn=_rms_norm_fn,
    ),
    Case(
        "rotary", "decoder_block", "Rotary",
        samples=lambda: [((_heads(1, 2, 5, 8), torch.randn(5, 8), torch.randn(5, 8)), {}), ((_r(3, 4), _r(3, 4), _r(1, 4)), {})],
        inputs=lambda: (_heads(1, 2, 5, 8), torch.randn(5, 8), torch.randn(5, 8)),
        compile_fn=_rotary_fn,
        grad_inputs=lambda: (_heads(1, 2, 3, 4, dtype=torch.double), _r(3, 4, dtype=torch.double), _r(3, 4, dtype=torch.double)),
        grad_fn=_rotary_fn,
    ),
    Case(
        "swiglu", "decoder_block", "SwiGLU",
        samples=lambda: [((_r(2, 6), _r(2, 6)), {}), ((_r(3), torch.randn(3)), {}), ((_r(), _r()), {})],
        inputs=lambda: (_r(2, 6), _r(2, 6)),
        compile_fn=_swiglu_fn,
        grad_inputs=lambda: (_r(2, 6, dtype=torch.double), _r(2, 6, dtype=torch.double)),
        grad_fn=_swiglu_fn,
    ),
    Case(
        "attention", "decoder_block", "Attention",
        samples=lambda: [((_heads(1, 2, 5, 8), _heads(1, 2, 5, 8), _heads(1, 2, 5, 8)), {}), ((_r(3, 4), _r(3, 4), torch.randn(3, 2)), {})],
        inputs=lambda: (_heads(1, 2, 5, 8), _heads(1, 2, 5, 8), _heads(1, 2, 5, 8)),
        compile_fn=_attention_fn,
        grad_inputs=lambda: (_heads(1, 2, 4, 4, dtype=torch.double), _heads(1, 2, 4, 4, dtype=torch.double), _heads(1, 2, 4, 4, dtype=torch.double)),
        grad_fn=_attention_fn,
    ),
    # examples/out_variants.py: one out-style kernel serving the functional op and both overloads.
    Case(
        "out_variants_rms_norm", "out_variants", "RmsNorm",
        samples=lambda: [((_r(2, 3, 8), _r(8), 1e-6), {}), ((_r(5, 4), torch.ones(4), 0.1), {}), ((_r(4, 6).t(), _r(4), 1e-5), {})],
        inputs=lambda: (_r(2, 3, 8), _r(8)),
        compile_fn=_out_rms_norm_fn,
        grad_inputs=lambda: (_r(2, 3, 8, dtype=torch.double), _r(8, dtype=torch.double)),
        grad_fn=_out_rms_norm_fn,
    ),
    Case(
        "out_variants_rms_norm_out", "out_variants", "RmsNorm.out",
        samples=lambda: [
            ((torch.randn(2, 3, 8), torch.randn(8), 1e-6), {"out": torch.empty(2, 3, 8)}),
            ((torch.randn(5, 4), torch.randn(4), 0.1), {"out": torch.empty(5, 4)}),
            ((torch.randn(4, 6).t(), torch.randn(4), 1e-5), {"out": torch.empty(6, 4, dtype=torch.double)}),
        ],
        inputs=lambda: (torch.randn(2, 3, 8), torch.randn(8), torch.empty(2, 3, 8)),
        compile_fn=_out_rms_norm_out_fn,
    ),
    Case(
        "out_variants_rms_norm_inplace", "out_variants", "RmsNorm.inplace",
        samples=lambda: [((torch.randn(2, 3, 8), torch.randn(8), 1e-6), {}), ((torch.randn(4, 6).t(), torch.randn(4), 0.1), {})],
        inputs=lambda: (torch.randn(2, 3, 8), torch.randn(8)),
        compile_fn=_out_rms_norm_inplace_fn,
    ),
    *(
        Case(
            case_id, "variants", cls_name,
            samples=lambda: [((_r(5),), {}), ((torch.randn(2, 3) * 10,), {}), ((_r(),), {})],
            inputs=lambda: (_r(2, 5),),
            compile_fn=fn,
            grad_inputs=lambda: (_r(2, 5, dtype=torch.double),),
            grad_fn=fn,
        )
        for case_id, cls_name, fn in (
            ("softplus_numpy", "SoftplusNumpy", _softplus_numpy_fn),
            ("softplus_torch", "SoftplusTorch", _softplus_torch_fn),
        )
    ),
]
CASES_BY_ID = {c.id: c for c in CASES}


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(c, id=c.id, marks=_runs_here(c.stem)) for c in cases]


GRAD_CASES = [c for c in CASES if c.grad_inputs is not None]


def _detached(value: Any) -> Any:
    return torch.utils._pytree.tree_map_only(Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), value)


def _grads(inputs: tuple[Any, ...], out: Any) -> list[Tensor] | None:
    """Backward of sum(outputs) and the input grads, for ops with a backward."""
    leaves = [t for t in torch.utils._pytree.tree_leaves(inputs) if isinstance(t, Tensor) and t.requires_grad]
    outs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, Tensor) and t.requires_grad]
    if not leaves or not outs:
        return None
    return list(torch.autograd.grad(sum(o.sum() for o in outs), leaves))


@pytest.fixture
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------- opcheck / gradcheck


@pytest.mark.parametrize("case", _params(CASES))
def test_opcheck(case: Case) -> None:
    for args, kwargs in case.samples():
        result = torch.library.opcheck(case.cls.op, args, kwargs, test_utils=OPCHECK_UTILS)
        assert result == {u: "SUCCESS" for u in OPCHECK_UTILS}


@pytest.mark.parametrize("case", _params(GRAD_CASES))
def test_gradcheck(case: Case) -> None:
    assert case.grad_inputs is not None and case.grad_fn is not None
    assert torch.autograd.gradcheck(case.grad_fn, case.grad_inputs())


def test_every_example_op_is_covered() -> None:
    """A new op in one of these examples needs a Case here."""
    from opclass import CustomOp

    covered = {(c.stem, c.cls_name) for c in CASES}
    for stem in {c.stem for c in CASES if UNAVAILABLE[c.stem] is None}:
        module = _load(stem)
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, CustomOp) and value.__module__ == module.__name__:
                if value.__dict__.get("_opclass_record") is not None:  # concrete ops only
                    assert (stem, name) in covered, f"{stem}.{name} has no Case"


# --------------------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("case", _params(CASES))
def test_compile_matches_eager(case: Case, fresh_dynamo: None) -> None:
    inputs = case.inputs()
    eager_inputs, compiled_inputs = _detached(inputs), _detached(inputs)
    expected = case.compile_fn(*eager_inputs)
    compiled = torch.compile(case.compile_fn, fullgraph=True, backend="aot_eager")
    got = compiled(*compiled_inputs)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_inputs, eager_inputs)  # same mutations
    expected_grads = _grads(eager_inputs, expected)
    if case.grad_inputs is not None:
        assert expected_grads is not None
        torch.testing.assert_close(_grads(compiled_inputs, got), expected_grads)


@pytest.mark.slow
def test_compile_numpy_sin_inductor(fresh_dynamo: None) -> None:
    def fn(x: Tensor) -> Tensor:
        return NumpySin(x).cos() + 1

    x = torch.randn(8, 3, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    compiled = torch.compile(fn, fullgraph=True, backend="inductor")
    got = compiled(x)
    expected = torch.sin(x2).cos() + 1
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


@pytest.mark.slow
def test_compile_out_variants_inductor(fresh_dynamo: None) -> None:
    """Inductor lowers the functional op to its .out overload (and the in-place call to .inplace):
    it works because eps has no default (see the example's docstring)."""
    import torch._inductor.config

    def fn(x: Tensor, w: Tensor, donated: Tensor) -> tuple[Tensor, Tensor]:
        y = OutRmsNorm(x + 1, w, 1e-5) * 2
        OutRmsNorm.inplace(donated, w, 1e-5)
        return y, donated + 1

    x, w, donated = torch.randn(4, 8), torch.randn(8), torch.randn(4, 8)
    expected_donated = out_variants.rms_norm_reference(donated, w, 1e-5)
    with torch._inductor.config.patch(fx_graph_cache=False):
        y, after = torch.compile(fn, fullgraph=True, backend="inductor")(x, w, donated)
    torch.testing.assert_close(y, out_variants.rms_norm_reference(x + 1, w, 1e-5) * 2)
    torch.testing.assert_close(donated, expected_donated)  # written, as in eager mode
    torch.testing.assert_close(after, expected_donated + 1)


# --------------------------------------------------------------------------- torch.export


class _CallOp(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize("case", _params(CASES))
def test_export_calls_op_once(case: Case) -> None:
    op = case.cls.op
    # Export traces for inference here: inputs without requires_grad.
    inputs = torch.utils._pytree.tree_map_only(Tensor, lambda t: t.detach(), case.inputs())
    ep = torch.export.export(_CallOp(case.compile_fn), _detached(inputs))
    calls = [n for n in ep.graph.nodes if n.op == "call_function" and n.target is op]
    assert len(calls) == 1, f"expected one call to {op} in\n{ep.graph}"
    # The exported program computes what eager does.
    eager_inputs, exported_inputs = _detached(inputs), _detached(inputs)
    torch.testing.assert_close(ep.module()(*exported_inputs), case.compile_fn(*eager_inputs))
