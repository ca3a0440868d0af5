"""Property tests: for generated op signatures and inputs, ``MyOp(...)`` behaves like ``MyOp.op(...)``.

Hypothesis draws an op signature (1-5 Tensor parameters, optional int/float/bool parameters with or
without defaults, any of them keyword-only, one Tensor mutated or none), builds the op class with a
generated kernel (a fresh ``sum(tensors) * floats + ints`` result, or ``x.add_(...)`` returning
``None``), then draws calls (shapes, float32/float64, requires_grad, contiguity, nn.Parameter,
omitted defaults, keywords for positional parameters, ints for floats, a context) and checks that
the fast path and the dispatcher agree on outputs, gradients, version counters and exceptions
(``assert_same`` from ``test_fastpath_equivalence``). ``torch.library.opcheck`` runs on each op's
first call. Every op lives in its own namespace, removed when the example ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor

import opclass
from opclass import CustomOp
from test_fastpath_equivalence import Inputs, RecordingDispatchMode, Scenario, assert_same, make_corpus

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


_NO_DEFAULT: Any = _NoDefault()
_COUNTER = itertools.count()

# --------------------------------------------------------------------------- signatures


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "Tensor", "int", "float", "bool"
    kwarg_only: bool
    default: Any = _NO_DEFAULT

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def source(self) -> str:
        ann = {"Tensor": "Tensor"}.get(self.kind, self.kind)
        return f"{self.name}: {ann}" + (f" = {self.default!r}" if self.has_default else "")


@dataclasses.dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]  # in signature order: positional, then keyword-only
    mutated: Optional[str]  # the Tensor the kernel mutates (the op then returns None)
    with_backward: bool
    returns: str = "tensor"  # functional ops: "tensor", "pair" (tuple[Tensor, Tensor]) or "list" (list[Tensor])
    container: str = "tuple"  # what a "pair" kernel builds its result with: "tuple" or "list"

    @property
    def tensors(self) -> list[Param]:
        return [p for p in self.params if p.kind == "Tensor"]

    def of_kind(self, kind: str) -> list[str]:
        return [p.name for p in self.params if p.kind == kind]

    def kernel_source(self) -> str:
        parts, star = [], False
        for p in self.params:
            if p.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(p.source())
        tensors = self.of_kind("Tensor")
        ints, floats, bools = self.of_kind("int"), self.of_kind("float"), self.of_kind("bool")
        if self.mutated is not None:
            amount = " + ".join(["1", *ints, *floats]) or "1"
            body = [f"    {self.mutated}.add_({amount})"]
            for b in bools:
                body += [f"    if {b}:", f"        {self.mutated}.neg_()"]
            ret = "None"
        else:
            body = [f"    out = {tensors[0]} * 1"]
            body += [f"    out = out + {t}" for t in tensors[1:]]
            body += [f"    out = out * {f}" for f in floats]
            body += [f"    out = out + {i}" for i in ints]
            body += [f"    if {b}:\n        out = -out" for b in bools]
            if self.returns == "tensor":
                body += ["    return out"]
                ret = "Tensor"
            elif self.returns == "pair":
                body += ["    return (out, out * 2)" if self.container == "tuple" else "    return [out, out * 2]"]
                ret = "tuple[Tensor, Tensor]"
            else:
                body += ["    return [out, -out]"]
                ret = "list[Tensor]"
        return f"def kernel({', '.join(parts)}) -> {ret}:\n" + "\n".join(body) + "\n"

    def describe(self) -> str:
        return self.kernel_source() + f"mutated={self.mutated} backward={self.with_backward}"


@st.composite
def signatures(draw: st.DrawFn) -> Signature:
    n_tensors = draw(st.integers(1, 5))
    scalar_kinds = draw(st.lists(st.sampled_from(["int", "float", "bool"]), max_size=3))
    raw: list[tuple[str, str]] = [(f"t{i}", "Tensor") for i in range(n_tensors)]
    raw += [(f"{k[0]}{i}", k) for i, k in enumerate(scalar_kinds)]
    raw = draw(st.permutations(raw))
    params = []
    for name, kind in raw:
        kwarg_only = draw(st.booleans())
        default = _NO_DEFAULT
        if kind != "Tensor" and draw(st.booleans()):
            default = draw({"int": st.integers(-3, 3), "float": st.sampled_from([0.5, 1.0, 2.0, -1.5]), "bool": st.booleans()}[kind])
        params.append(Param(name, kind, kwarg_only, default))
    # Python's rules: keyword-only after positional; positional defaults after the others.
    positional = [p for p in params if not p.kwarg_only]
    positional = [p for p in positional if not p.has_default] + [p for p in positional if p.has_default]
    keyword_only = [p for p in params if p.kwarg_only]
    mutated = draw(st.one_of(st.none(), st.sampled_from([p.name for p in params if p.kind == "Tensor"])))
    returns = "tensor" if mutated is not None else draw(st.sampled_from(["tensor", "pair", "list"]))
    container = draw(st.sampled_from(["tuple", "list"])) if returns == "pair" else "tuple"
    with_backward = mutated is None and returns != "list" and draw(st.booleans() | st.just(True))
    return Signature(tuple(positional + keyword_only), mutated, with_backward, returns, container)


def define(sig: Signature, namespace: str) -> Any:
    """Build the op class for ``sig`` in ``namespace``."""
    scope: dict[str, Any] = {"Tensor": Tensor, "torch": torch}
    exec(compile(sig.kernel_source(), f"<generated kernel {namespace}>", "exec"), scope)  # noqa: S102
    kernel = scope["kernel"]
    body: dict[str, Any] = {"cpu": staticmethod(kernel)}
    mutates: tuple[str, ...] = ()
    if sig.mutated is not None:
        mutates = (sig.mutated,)
    else:
        body["abstract"] = staticmethod(kernel)  # torch ops only: runs on fake tensors as well
    if sig.with_backward:
        positional = [p.name for p in sig.params if not p.kwarg_only]
        keyword_only = [p.name for p in sig.params if p.kwarg_only]
        floats, bools, tensors = sig.of_kind("float"), sig.of_kind("bool"), set(sig.of_kind("Tensor"))

        def save(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any]) -> None:
            values = {**dict(zip(positional, inputs)), **keyword_only_inputs}
            factor = 1.0
            for f in floats:
                factor *= values[f]
            for b in bools:
                factor = -factor if values[b] else factor
            ctx.factor = factor
            ctx.dtypes = {t: values[t].dtype for t in tensors}

        if keyword_only:

            def setup_context(ctx, inputs, keyword_only_inputs, output):
                save(ctx, inputs, keyword_only_inputs)

        else:

            def setup_context(ctx, inputs, output):
                save(ctx, inputs, {})

        if sig.returns == "pair":

            def backward(ctx, grad, grad2):
                total = grad + grad2 * 2
                return tuple((total * ctx.factor).to(ctx.dtypes[n]) if n in tensors else None for n in positional + keyword_only)

        else:

            def backward(ctx, grad):
                return tuple((grad * ctx.factor).to(ctx.dtypes[n]) if n in tensors else None for n in positional + keyword_only)

        body["setup_context"] = staticmethod(setup_context)
        body["backward"] = staticmethod(backward)
    return type(CustomOp)("Generated", (CustomOp,), body, name=f"{namespace}::gen", mutates_args=mutates)


# --------------------------------------------------------------------------- calls


@dataclasses.dataclass
class TensorSpec:
    dtype: torch.dtype
    requires_grad: bool
    contiguous: bool
    parameter: bool


@dataclasses.dataclass
class Call:
    shape: tuple[int, ...]
    tensors: dict[str, TensorSpec]
    values: dict[str, Any]  # scalar arguments passed (omitted defaults are absent)
    by_keyword: frozenset[str]  # positional parameters passed by keyword
    context: str
    seed: int

    def make(self, sig: Signature) -> Callable[[Inputs], tuple[tuple[Any, ...], dict[str, Any]]]:
        def make_inputs(I: Inputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            keyword_mode = False  # once one positional parameter goes by keyword, the rest must too
            for p in sig.params:
                if p.kind == "Tensor":
                    value: Any = I.T(*self.shape, dtype=self.tensors[p.name].dtype)
                elif p.name in self.values:
                    value = self.values[p.name]
                else:
                    keyword_mode = True  # an omitted default: later ones can only go by keyword
                    continue
                if p.kwarg_only or keyword_mode or p.name in self.by_keyword:
                    keyword_mode = keyword_mode or not p.kwarg_only
                    kwargs[p.name] = value
                else:
                    args.append(value)
            return tuple(args), kwargs

        return make_inputs

    def variant(self, sig: Signature) -> Callable[[Tensor, int, Inputs], Tensor]:
        specs = [self.tensors[p.name] for p in sig.params if p.kind == "Tensor"]

        def variant(t: Tensor, i: int, I: Inputs) -> Tensor:
            spec = specs[i]
            if not spec.contiguous:
                t = torch.stack([t, t * 0], -1)[..., 0]
            if spec.parameter:
                return torch.nn.Parameter(t, requires_grad=spec.requires_grad)
            return t.requires_grad_(spec.requires_grad)

        return variant


@contextlib.contextmanager
def _inference_mode_enable_grad() -> Any:
    with torch.inference_mode(), torch.enable_grad():
        yield


_CONTEXTS: dict[str, Callable[[], Any]] = {
    "plain": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "inference_mode_enable_grad": _inference_mode_enable_grad,
    "dispatch_mode": RecordingDispatchMode,
}


def _scalar(kind: str) -> st.SearchStrategy[Any]:
    if kind == "int":
        return st.integers(-5, 5)
    if kind == "float":
        # ints are valid floats for the dispatcher; the fast path must convert (or defer) the same way
        return st.one_of(st.floats(-4, 4, allow_nan=False, width=32), st.integers(-3, 3))
    return st.booleans()


@st.composite
def calls(draw: st.DrawFn, sig: Signature) -> Call:
    ndim = draw(st.integers(0, 2))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    tensors = {}
    for p in sig.tensors:
        rg = draw(st.booleans())
        tensors[p.name] = TensorSpec(
            dtype=draw(st.sampled_from([torch.float32, torch.float64])),
            requires_grad=rg,
            contiguous=draw(st.booleans()),
            parameter=draw(st.booleans()) if rg else False,
        )
    values = {}
    for p in sig.params:
        if p.kind != "Tensor" and (not p.has_default or draw(st.booleans())):
            values[p.name] = draw(_scalar(p.kind))
    by_keyword = frozenset(p.name for p in sig.params if not p.kwarg_only and draw(st.booleans()))
    context = draw(st.sampled_from(list(_CONTEXTS)))
    return Call(shape, tensors, values, by_keyword, context, draw(st.integers(0, 2**16)))


# --------------------------------------------------------------------------- properties


def _opcheck(cls: Any, call: Call, sig: Signature) -> None:
    if sig.mutated is not None and call.tensors[sig.mutated].requires_grad:
        # A kernel that changes a written Tensor with autograd history is refused (assert_same
        # compares that): opcheck, which passes clones with history, checks a call that can succeed.
        spec = call.tensors[sig.mutated]
        call = dataclasses.replace(call, tensors={**call.tensors, sig.mutated: dataclasses.replace(spec, requires_grad=False, parameter=False)})
    I = Inputs(call.variant(sig))
    torch.manual_seed(call.seed)
    args, kwargs = call.make(sig)(I)
    result = torch.library.opcheck(cls.op, args, kwargs, test_utils=OPCHECK_UTILS)
    assert result == {u: "SUCCESS" for u in OPCHECK_UTILS}, result


@settings(max_examples=250, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sig=signatures(), data=st.data())
def test_generated_ops_fast_path_matches_dispatcher(ns: str, sig: Signature, data: st.DataObject) -> None:
    namespace = f"{ns}_{next(_COUNTER)}"
    try:
        cls = define(sig, namespace)
        n_calls = data.draw(st.integers(1, 3), label="calls")
        for k in range(n_calls):
            call = data.draw(calls(sig), label=f"call {k}")
            if k == 0:
                _opcheck(cls, call, sig)
            scenario = Scenario(call.context, call.variant(sig), _CONTEXTS[call.context])
            try:
                assert_same(cls, _seeded(call.make(sig), call.seed), scenario)
            except AssertionError as e:
                raise AssertionError(f"{sig.describe()}\n{call}\n{e}") from None
    finally:
        opclass.remove_namespace(namespace)


def _seeded(make: Callable[[Inputs], Any], seed: int) -> Callable[[Inputs], Any]:
    """``make`` with its own seed (assert_same seeds both calls with 0; this varies the data)."""

    def make_inputs(I: Inputs) -> Any:
        torch.manual_seed(seed)
        return make(I)

    return make_inputs


# Values of every Python type a caller might pass for an int / float / bool parameter.
_ANY_SCALAR = st.one_of(
    st.integers(-(2**64), 2**64),
    st.integers(-5, 5),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.integers(-5, 5).map(np.int64),
    st.floats(-5, 5).map(np.float64),
    st.floats(-5, 5).map(np.float32),
    st.integers(-5, 5).map(lambda i: torch.tensor(i)),
    st.floats(-5, 5).map(lambda f: torch.tensor(f)),
    st.none(),
    st.just("2"),
    st.complex_numbers(max_magnitude=4, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=300, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    alpha=_ANY_SCALAR,
    n=_ANY_SCALAR,
    flag=_ANY_SCALAR,
    beta=_ANY_SCALAR,
    requires_grad=st.booleans(),
)
def test_scalar_arguments_of_any_type(ns: str, alpha: Any, n: Any, flag: Any, beta: Any, requires_grad: bool) -> None:
    """Fixed op, fuzzed non-Tensor arguments: conversions and refusals are the dispatcher's."""
    namespace = f"{ns}_{next(_COUNTER)}"
    try:
        case = make_corpus(namespace, ["multi"])["multi"]

        def make_inputs(I: Inputs) -> Any:
            return (I.T(3), I.T(3), alpha, n, flag), {"beta": beta}

        variant = (lambda t, i, I: t.requires_grad_()) if requires_grad else (lambda t, i, I: t)
        assert_same(case.cls, make_inputs, Scenario("fuzz", variant))
    finally:
        opclass.remove_namespace(namespace)


def test_signature_strategy_builds_valid_classes(ns: str) -> None:
    """A few hand-written signatures through ``define``: the generator itself is sound."""
    sigs = [
        Signature((Param("t0", "Tensor", False),), None, True),
        Signature((Param("t0", "Tensor", False), Param("f0", "float", False, 2.0), Param("t1", "Tensor", True)), None, True),
        Signature((Param("t0", "Tensor", False), Param("i0", "int", True, 1), Param("b0", "bool", True)), "t0", False),
    ]
    for k, sig in enumerate(sigs):
        namespace = f"{ns}_{k}"
        try:
            cls = define(sig, namespace)
            assert cls.qualname == f"{namespace}::gen"
            assert ("!)" in cls.schema) == (sig.mutated is not None), cls.schema
        finally:
            opclass.remove_namespace(namespace)
