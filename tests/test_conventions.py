"""Calling conventions (issue 44): one class statement with ``out=True, inplace=(...)`` offers its
op functional, with ``out=`` and in place, and each kernel may be written in any of the three
styles (``opclass.style``).

The ops are an RMS norm ``(Tensor x, Tensor w, float eps) -> Tensor`` with ``inplace=("x",)`` and
vLLM's ``fused_add_rms_norm`` ``(Tensor x, Tensor residual, Tensor w, float eps) -> (Tensor, Tensor)``
with ``inplace=("x", "residual")``; ``_conventions_twins.py`` writes them by hand with
``torch.library``. In order, the tests show that

1. the three overloads are what a careful author writes (schemas, tags, opcheck, values, the
   errors and warning of a bad ``out``), against those twins;
2. each kernel style runs each overload (six adapters), copying nothing where the styles match
   (the kernel gets the caller's very buffer) and only what it must elsewhere;
3. providers of any style are chosen by the op's order on every overload, ``supports=`` included;
4. the class call is ``torch.ops`` for every overload (values, errors, warnings), under both guards;
5. autograd: the functional overload passes gradcheck, ``out=`` with grad raises torch's error;
6. compile and export trace the functional op, Inductor calls the ``.out`` overload;
7. definition errors; 8. redefinition and removal take the overloads away.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import os
import subprocess
import sys
import warnings
from typing import Any, Callable, Iterator
from unittest import mock

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths, diff, observe

from _conventions_twins import SCHEMAS, define_twins, fused_add_rms_norm, inv_rms, qualname, rms_norm, rms_norm_backward
from _errors import error_of, first_line
from _marks import NATIVE_GUARD_MISSING
from _twins import failures, outcome, schema_of, seen
from _versions import missing_tags

EPS = 1e-5
STYLES = ("functional", "out", "inplace")
KINDS = ("functional", "out", "inplace")  # the ops: ns::op, ns::op.out, ns::op_ (see overload_of)

# --------------------------------------------------------------------------- the ops
#
# Each kernel records what it receives (``got``), and computes (x * r) * w as rms_norm does, so
# that every style gives the same bits. The out-style and in-place kernels never call copy_ or
# clone: a copy counted around a call is the adapter's.


def _rms_kernel(style: str, got: list[dict[str, Tensor]]) -> Any:
    def functional(x: Tensor, w: Tensor, eps: float) -> Tensor:
        got.append({"x": x})
        return rms_norm(x, w, eps)

    def out(x: Tensor, w: Tensor, eps: float, *, out: Tensor) -> None:
        got.append({"x": x, "out": out})
        torch.mul(x * inv_rms(x, eps), w, out=out)

    def inplace(x: Tensor, w: Tensor, eps: float) -> None:
        got.append({"x": x})
        x.mul_(inv_rms(x, eps)).mul_(w)

    def out_copying(x: Tensor, w: Tensor, eps: float, *, out: Tensor) -> None:
        """One copy too many: the result computed aside, then copied into ``out``."""
        got.append({"x": x, "out": out})
        out.resize_(x.shape).copy_(rms_norm(x, w, eps))

    kernels = {"functional": functional, "out": out, "inplace": inplace, "out, copying": out_copying}
    return staticmethod(opclass.style(style.partition(",")[0])(kernels[style]))


def _fused_kernel(style: str, got: list[dict[str, Tensor]]) -> Any:
    def functional(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        got.append({"x": x, "residual": residual})
        return fused_add_rms_norm(x, residual, w, eps)

    def out(x: Tensor, residual: Tensor, w: Tensor, eps: float, *, out0: Tensor, out1: Tensor) -> None:
        got.append({"x": x, "residual": residual, "out0": out0, "out1": out1})
        torch.add(x, residual, out=out1)
        torch.mul(out1 * inv_rms(out1, eps), w, out=out0)

    def inplace(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> None:
        got.append({"x": x, "residual": residual})
        residual.add_(x)
        torch.mul(residual * inv_rms(residual, eps), w, out=x)

    return staticmethod(opclass.style(style)({"functional": functional, "out": out, "inplace": inplace}[style]))


def rms_class(ns: str, style: str = "functional", got: list[dict[str, Tensor]] | None = None) -> Any:
    class Rms(CustomOp, name=f"{ns}::rms", out=True, inplace=("x",)):
        cpu = _rms_kernel(style, [] if got is None else got)

        @staticmethod
        def abstract(x: Tensor, w: Tensor, eps: float) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
            x, w, eps = inputs
            ctx.save_for_backward(x, w)
            ctx.eps = eps

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
            x, w = ctx.saved_tensors
            return (*rms_norm_backward(grad, x, w, ctx.eps), None)

    return Rms


def fused_class(ns: str, style: str = "functional", got: list[dict[str, Tensor]] | None = None) -> Any:
    class FusedAddRms(CustomOp, name=f"{ns}::fused_add_rms", out=True, inplace=("x", "residual")):
        cpu = _fused_kernel(style, [] if got is None else got)

        @staticmethod
        def abstract(x: Tensor, residual: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
            return torch.empty_like(x), torch.empty_like(x)

    return FusedAddRms


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """One op of the tests: its class statement, its math, its parameters and out arguments."""

    define: Callable[..., Any]
    reference: Callable[..., Any]
    params: tuple[str, ...]
    outs: tuple[str, ...]
    written: tuple[str, ...]  # what inplace= names


OPS = {
    "rms": OpInfo(rms_class, rms_norm, ("x", "w", "eps"), ("out",), ("x",)),
    "fused_add_rms": OpInfo(fused_class, fused_add_rms_norm, ("x", "residual", "w", "eps"), ("out0", "out1"), ("x", "residual")),
}


def inputs(name: str, seed: int = 0, rows: int = 3) -> list[Any]:
    """The functional op's arguments: ``x`` (rows x 8), ``residual`` (fused only), ``w`` (8), eps."""
    g = torch.Generator().manual_seed(seed)
    x, residual, w = torch.randn(rows, 8, generator=g), torch.randn(rows, 8, generator=g), torch.randn(8, generator=g)
    return [x, w, EPS] if name == "rms" else [x, residual, w, EPS]


def expected(name: str, args: list[Any]) -> tuple[Tensor, ...]:
    result = OPS[name].reference(*args)
    return result if isinstance(result, tuple) else (result,)


def packet(ns: str, name: str) -> Any:
    return getattr(getattr(torch.ops, ns), name)


def overload_of(ns: str, name: str, kind: str) -> Any:
    """The OpOverload of one convention: ``ns::rms``, ``ns::rms.out``, or the in-place op ``ns::rms_``."""
    op, _, overload = qualname(ns, name, kind).partition("::")[2].partition(".")
    return getattr(packet(ns, op), overload or "default")


def as_tuple(result: Any) -> tuple[Any, ...]:
    return result if isinstance(result, tuple) else (result,)


@pytest.fixture
def twins(ns: str) -> Iterator[str]:
    """The namespace of the hand-written twins, ``<ns>_twin``."""
    lib = define_twins(f"{ns}_twin")
    yield f"{ns}_twin"
    lib._destroy()


def outcome_and_warnings(fn: Callable[[], Any]) -> tuple[Any, list[tuple[str, str]]]:
    """``fn()``'s value (each Tensor as its device, dtype, shape and values) or error (type, first
    line), and the warnings it raised (category, first line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = torch.utils._pytree.tree_map_only(Tensor, lambda t: (t.device.type, t.dtype, tuple(t.shape), None if t.is_meta else t.tolist()), fn())
        except Exception as e:  # noqa: BLE001 - errors are compared too
            result = (type(e).__name__, first_line(e))
    return result, [(w.category.__name__, str(w.message).splitlines()[0]) for w in caught]


# --------------------------------------------------------------------------- 1. what a careful author writes


@pytest.mark.parametrize("name", OPS)
def test_overloads_have_the_hand_written_schemas_and_tags(ns: str, twins: str, name: str) -> None:
    Op = OPS[name].define(ns)
    for kind, (schema, tags) in SCHEMAS[name].items():
        mine, theirs = overload_of(ns, name, kind), overload_of(twins, name, kind)
        assert schema_of(mine) == schema_of(theirs) == schema, kind
        assert sorted(map(str, mine.tags)) == sorted(map(str, theirs.tags)), kind
        assert {t for t in tags if t is not None} <= set(mine.tags), kind
        assert (Op if kind == "functional" else getattr(Op, kind)).op is mine, kind
    assert sorted(packet(ns, name).overloads()) == ["default", "out"]
    assert packet(ns, f"{name}_").overloads() == ["default"]


def _twin_calls(name: str, kind: str) -> list[Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]]:
    """Calls of one overload for :func:`_twins.seen`: buffers of the result's shape (torch.compile
    refuses an ``out=`` of another shape, see the eager test below)."""
    outs = OPS[name].outs

    def plain() -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = inputs(name)
        return tuple(args), ({n: torch.empty(3, 8) for n in outs} if kind == "out" else {})

    calls = [plain]
    if name == "rms" and kind == "functional":  # with an autograd formula: opcheck checks it
        calls.append(lambda: ((inputs(name)[0].requires_grad_(), inputs(name)[1].requires_grad_(), EPS), {}))
    return calls


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", OPS)
def test_each_overload_behaves_as_its_twin(ns: str, twins: str, name: str, kind: str) -> None:
    """Eager, torch.compile, torch.export and opcheck: the class calling each overload shows what
    the twin overload shows."""
    Op = OPS[name].define(ns)
    mine = Op if kind == "functional" else getattr(Op, kind)
    calls = _twin_calls(name, kind)
    record, twin_record = seen(mine, calls), seen(overload_of(twins, name, kind), calls)
    assert not failures(record), failures(record)
    assert record["compile 0"] == record["eager 0"]
    # The export graphs name the overloads: the twin's namespace read as the op's.
    theirs = torch.utils._pytree.tree_map_only(str, lambda s: s.replace(f"{twins}.", f"{ns}."), twin_record)
    if kind != "functional" and not any(t is not None for t in SCHEMAS[name][kind][1]):
        # torch functionalizes no custom op that returns arguments it writes unless it is tagged
        # Tag.out or Tag.inplace (which torch 2.11 and 2.12 lack, and which is for one written
        # argument): the twin fails under compile, where opclass's overload is traced as the
        # functional op followed by the writes.
        assert theirs.pop("compile 0")[0] == "BackendCompilerFailed"
        assert "whose output has alias annotations" in theirs.pop("opcheck 0")[1]
        del record["compile 0"], record["opcheck 0"]
    assert record == theirs


@pytest.mark.parametrize("name", OPS)
def test_a_bad_out_fails_and_warns_as_the_twins_out_kernel(ns: str, twins: str, name: str) -> None:
    """The twin's ``.out`` kernel computes the result, then ``_maybe_resize_out`` and
    ``_safe_copy_out``: a functional kernel adapted to ``.out`` gives its errors, warning and values."""
    Op = OPS[name].define(ns)
    outs = OPS[name].outs
    buffers = {
        "empty": lambda: torch.empty(0),
        "another shape": lambda: torch.empty(2),
        "int64": lambda: torch.empty(3, 8, dtype=torch.int64),
        "meta": lambda: torch.empty(3, 8, device="meta"),
    }
    found = {}
    for case, make in buffers.items():
        for label, fn in {"Op(..., out=)": Op, "Op.out": Op.out, "torch.ops": overload_of(ns, name, "out"), "twin": overload_of(twins, name, "out")}.items():
            bufs = {n: make() for n in outs}
            found[case, label] = (*outcome_and_warnings(lambda: fn(*inputs(name), **bufs)), [tuple(b.shape) for b in bufs.values()])
        assert found[case, "Op(..., out=)"] == found[case, "Op.out"] == found[case, "torch.ops"] == found[case, "twin"], case
    # What the twin does (and so opclass): an empty out resized silently, another shape with a
    # warning, an unsafe cast refused.
    values = tuple(("cpu", torch.float32, (3, 8), t.tolist()) for t in expected(name, inputs(name)))
    assert found["empty", "twin"] == (values[0] if len(values) == 1 else values, [], [(3, 8)] * len(outs))
    value, caught, shapes = found["another shape", "twin"]
    assert value == found["empty", "twin"][0] and shapes == [(3, 8)] * len(outs)
    assert [c for c, _ in caught] == ["UserWarning"] * len(outs)
    assert caught[0][1].startswith("An output with one or more elements was resized since it had shape torch.Size([2])")
    unsafe = "Attempting to cast from torch.float32 to out tensor with dtype torch.int64, but this can't be cast because it is not safe!"
    assert found["int64", "twin"][0] == ("RuntimeError", unsafe)
    # A meta out sends the call to the Meta key, where the fake kernel (the twin's and opclass's
    # alike) returns out: neither refuses the device (torch's own out= ops do, in their meta functions).
    on_meta = tuple(("meta", torch.float32, (3, 8), None) for _ in outs)
    assert found["meta", "twin"][:2] == (on_meta[0] if len(outs) == 1 else on_meta, [])


# --------------------------------------------------------------------------- 2. the adapters


@contextlib.contextmanager
def copies_counted() -> Iterator[collections.Counter[str]]:
    """Counts the Tensor copies made from Python in the block (``Tensor.copy_``, ``Tensor.clone``,
    ``torch.clone``), each still done by torch: what an adapter copying would call."""
    counts: collections.Counter[str] = collections.Counter()

    def counting(owner: Any, attribute: str, key: str) -> Any:
        real = getattr(owner, attribute)

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return real(*args, **kwargs)

        return mock.patch.object(owner, attribute, counted)

    with counting(torch.Tensor, "copy_", "copy_"), counting(torch.Tensor, "clone", "clone"), counting(torch, "clone", "clone"):
        yield counts


#: (kernel style, overload) -> the copies per output of the op: none where the styles match; else
#: the result into ``out`` or the written argument, and an in-place kernel writes a clone.
COPIES: dict[tuple[str, str], dict[str, int]] = {
    ("functional", "functional"): {},
    ("out", "out"): {},
    ("inplace", "inplace"): {},
    ("functional", "out"): {"copy_": 1},
    ("functional", "inplace"): {"copy_": 1},
    ("out", "functional"): {},  # into buffers the op's abstract allocates
    ("out", "inplace"): {"copy_": 1},
    ("inplace", "functional"): {"clone": 1},
    ("inplace", "out"): {"clone": 1, "copy_": 1},
}


def overload_calls(Op: Any, ns: str, name: str, kind: str) -> dict[str, Callable[..., Any]]:
    """The ways to call one overload: the class calls, then ``torch.ops``."""
    classes = {"functional": {"Op(...)": Op}, "out": {"Op(..., out=)": Op, "Op.out(...)": Op.out}, "inplace": {"Op.inplace(...)": Op.inplace}}
    return {**classes[kind], "torch.ops": overload_of(ns, name, kind)}


def check_adapted(Op: Any, ns: str, name: str, have: str, want: str, got: list[dict[str, Tensor]]) -> None:
    """Every call of the ``want`` overload of ``Op`` (whose kernel is written ``have``): its values,
    what it returns and writes, what the kernel received, and the copies made on the way."""
    info = OPS[name]
    for label, call in overload_calls(Op, ns, name, want).items():
        where = f"{have} kernel, {label}"
        args = inputs(name)
        before = [a.clone() if isinstance(a, Tensor) else a for a in args]
        by_name = dict(zip(info.params, args))
        bufs = {n: torch.empty(0) for n in info.outs} if want == "out" else {}
        del got[:]
        with copies_counted() as copies:
            result = as_tuple(call(*args, **bufs))
        want_values = expected(name, before)
        assert len(result) == len(want_values) and all(torch.equal(r, e) for r, e in zip(result, want_values)), where
        # What the overload returns: the caller's buffers, or the caller's written arguments.
        mine = list(bufs.values()) if want == "out" else [by_name[n] for n in info.written] if want == "inplace" else []
        assert all(r is m for r, m in zip(result, mine)), where
        written = info.written if want == "inplace" else ()
        for param, arg, old in zip(info.params, args, before):
            if isinstance(arg, Tensor) and param not in written:
                assert torch.equal(arg, old), f"{where}: {param} was written"
        (received,) = got
        if have == want:  # the caller's very buffers, no copy
            for key in received:
                assert received[key] is (bufs[key] if key in bufs else by_name[key]), f"{where}: the kernel got a copy of {key}"
        elif have == "inplace":  # it writes a clone, never the caller's argument
            assert all(received[n] is not by_name[n] for n in info.written), where
        per_output = COPIES[have, want]
        assert dict(copies) == {k: n * len(info.outs) for k, n in per_output.items()}, f"{where}: copies {dict(copies)}"


@pytest.mark.parametrize("want", KINDS)
@pytest.mark.parametrize("have", STYLES)
@pytest.mark.parametrize("name", OPS)
def test_each_kernel_style_runs_each_overload(ns: str, name: str, have: str, want: str) -> None:
    got: list[dict[str, Tensor]] = []
    Op = OPS[name].define(ns, have, got)
    check_adapted(Op, ns, name, have, want, got)


def test_the_copy_count_catches_one_copy_too_many(ns: str) -> None:
    """:func:`check_adapted` fails for an out-style kernel that copies its result into ``out``:
    the count sees a copy the way an adapter would make it."""
    got: list[dict[str, Tensor]] = []
    Op = rms_class(ns, "out, copying", got)
    with pytest.raises(AssertionError, match=r"copies \{'copy_': 1\}"):
        check_adapted(Op, ns, "rms", "out", "out", got)


# --------------------------------------------------------------------------- 3. providers


def _provider_class(ns: str, ran: list[str], asked: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Any:
    def supports(*args: Any, **kwargs: Any) -> bool:
        asked.append((args, kwargs))
        return bool(args[2] >= 0.5)  # eps

    class Rms(CustomOp, name=f"{ns}::rms", out=True, inplace=("x",)):
        @staticmethod
        def cpu(x: Tensor, w: Tensor, eps: float) -> Tensor:
            ran.append("cpu")
            return rms_norm(x, w, eps)

        @staticmethod
        def abstract(x: Tensor, w: Tensor, eps: float) -> Tensor:
            return torch.empty_like(x)

        @opclass.provider("cpu")
        @staticmethod
        @opclass.style("out")
        def into_out(x: Tensor, w: Tensor, eps: float, *, out: Tensor) -> None:
            ran.append("into_out")
            torch.mul(x * inv_rms(x, eps), w, out=out)

        @opclass.provider("cpu", supports=supports)
        @staticmethod
        @opclass.style("inplace")
        def in_place(x: Tensor, w: Tensor, eps: float) -> None:
            ran.append("in_place")
            x.mul_(inv_rms(x, eps)).mul_(w)

    return Rms


def _run_every_overload(Op: Any, ns: str, ran: list[str], eps: float = 1.0) -> dict[str, list[str]]:
    """Which kernels ran for each call of each overload (checking the values as it goes)."""
    found = {}
    for kind in KINDS:
        for label, call in overload_calls(Op, ns, "rms", kind).items():
            x, w, _ = inputs("rms")
            want = rms_norm(x, w, eps)
            del ran[:]
            result = call(x, w, eps, **({"out": torch.empty(0)} if kind == "out" else {}))
            assert torch.equal(result, want), label
            found[f"{kind}: {label}"] = ran[:]
    return found


def test_providers_of_any_style_are_chosen_by_order_on_every_overload(ns: str) -> None:
    ran: list[str] = []
    Op = _provider_class(ns, ran, [])
    for overload in (Op, Op.out, Op.inplace):  # one order, the functional op's
        assert opclass.provider_order(overload, "cpu") == ("into_out", "in_place", "cpu")
    try:
        for first in ("into_out", "in_place", "cpu"):
            opclass.set_provider_order(Op, [first])
            assert set(map(tuple, _run_every_overload(Op, ns, ran).values())) == {(first,)}, first
        opclass.set_provider_order(Op, None)
        assert set(map(tuple, _run_every_overload(Op, ns, ran).values())) == {("into_out",)}
        for first in ("in_place", "cpu", "into_out"):
            with opclass.use_providers({Op: [first]}):
                assert set(map(tuple, _run_every_overload(Op, ns, ran).values())) == {(first,)}, first
    finally:
        opclass.set_provider_order(Op, None)


def test_supports_on_the_out_overload_never_sees_out(ns: str) -> None:
    """The predicate takes the functional op's arguments on every overload: the out buffers are
    not its business. It chooses on ``.out`` as on the functional op."""
    ran: list[str] = []
    asked: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    Op = _provider_class(ns, ran, asked)
    with opclass.use_providers({Op: ["in_place", "cpu"]}):
        for eps, chosen in ((1.0, "in_place"), (1e-5, "cpu")):
            for label, call in overload_calls(Op, ns, "rms", "out").items():
                x, w, _ = inputs("rms")
                buf = torch.empty(0)
                del ran[:], asked[:]
                assert torch.equal(call(x, w, eps, out=buf), rms_norm(x, w, eps)), label
                assert ran == [chosen], (label, eps)
                assert asked, label
                for args, kwargs in asked:
                    assert kwargs == {} and len(args) == 3 and args[0] is x and args[1] is w and args[2] == eps, (label, args, kwargs)
        assert opclass.which_provider(Op.out, x, w, 1.0, out=torch.empty(0)) == "in_place"


# --------------------------------------------------------------------------- 4. the class call is torch.ops


def _param_dict(name: str, args: list[Any]) -> dict[str, Any]:
    return dict(zip(OPS[name].params, args))


def _replace(name: str, args: list[Any], **changes: Any) -> list[Any]:
    values = _param_dict(name, args) | changes
    return [values[p] for p in OPS[name].params]


def _outs(name: str, make: Callable[[], Tensor]) -> dict[str, Tensor]:
    return {n: make() for n in OPS[name].outs}


Make = Callable[[str], "tuple[list[Any], dict[str, Any]]"]

#: overload -> case -> the call's arguments for op ``name``; a case whose name starts with "no_out"
#: passes no ``out`` by keyword, which only ``Op.out`` and ``torch.ops`` take.
CASES: dict[str, dict[str, Make]] = {
    "functional": {
        "values": lambda n: (inputs(n), {}),
        "keywords": lambda n: ([], _param_dict(n, inputs(n))),
        "int_eps": lambda n: (_replace(n, inputs(n), eps=1), {}),
        "str_eps": lambda n: (_replace(n, inputs(n), eps="1e-5"), {}),
        "missing_eps": lambda n: (inputs(n)[:-1], {}),
        "w_of_another_size": lambda n: (_replace(n, inputs(n), w=torch.ones(7)), {}),
        "requires_grad": lambda n: (_replace(n, inputs(n), x=inputs(n)[0].requires_grad_()), {}),
    },
    "out": {
        "values": lambda n: (inputs(n), _outs(n, lambda: torch.empty(3, 8))),
        "empty_out": lambda n: (inputs(n), _outs(n, lambda: torch.empty(0))),
        "out_of_another_shape": lambda n: (inputs(n), _outs(n, lambda: torch.zeros(2))),
        "keywords": lambda n: ([], _param_dict(n, inputs(n)) | _outs(n, lambda: torch.empty(0))),
        "int64_out": lambda n: (inputs(n), _outs(n, lambda: torch.zeros(3, 8, dtype=torch.int64))),
        "meta_out": lambda n: (inputs(n), _outs(n, lambda: torch.empty(3, 8, device="meta"))),
        "str_eps": lambda n: (_replace(n, inputs(n), eps="1e-5"), _outs(n, lambda: torch.empty(0))),
        "requires_grad": lambda n: (_replace(n, inputs(n), x=inputs(n)[0].requires_grad_()), _outs(n, lambda: torch.zeros(3, 8))),
        "no_out_missing": lambda n: (inputs(n), {}),
        "no_out_positional": lambda n: (inputs(n) + list(_outs(n, lambda: torch.empty(0)).values()), {}),
    },
    "inplace": {
        "values": lambda n: (inputs(n), {}),
        "keywords": lambda n: ([], _param_dict(n, inputs(n))),
        "result_of_another_shape": lambda n: (_replace(n, inputs(n, rows=1), w=torch.ones(3, 8)), {}),
        "int64_x": lambda n: (_replace(n, inputs(n), x=torch.ones(3, 8, dtype=torch.int64)), {}),
        "requires_grad_with_history": lambda n: (_replace(n, inputs(n), x=inputs(n)[0].requires_grad_() * 1), {}),
    },
}


def _observed(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """:func:`opclass._harness.observe` (value or error, every input afterwards, gradients) and the warnings raised."""
    caught: list[tuple[str, str]] = []

    def call(*a: Any, **k: Any) -> Any:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                return fn(*a, **k)
            finally:
                caught.extend((x.category.__name__, str(x.message).splitlines()[0]) for x in w)

    return {**observe(call, tuple(args), kwargs), "warnings": caught}


def class_paths(Op: Any, kind: str, out_keyword: bool) -> dict[str, Callable[..., Any]]:
    """The class calls of one overload under each guard (:func:`opclass._harness.call_paths`, the
    dispatcher left out); for ``.out``, ``Op(..., out=)`` too where the call passes ``out=``."""
    cls = Op if kind == "functional" else getattr(Op, kind)
    paths = {label: fn for label, fn in call_paths(cls).items() if not label.endswith(".op(...)")}
    if kind == "out" and out_keyword:
        paths.update({f"{label} with out=": fn for label, fn in call_paths(Op).items() if not label.endswith(".op(...)")})
    return paths


@pytest.mark.parametrize(("kind", "case"), [(kind, case) for kind, cases in CASES.items() for case in cases])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", OPS)
def test_class_calls_match_torch_ops(ns: str, name: str, style: str, kind: str, case: str) -> None:
    """Every class call of an overload, under the active guard and (where the native one is
    active) the pure-Python one, observes what ``torch.ops.<ns>.<op>.<overload>`` does: value or
    error, inputs and buffers afterwards, gradients, warnings."""
    Op = OPS[name].define(ns, style)
    reference = overload_of(ns, name, kind)
    make = CASES[kind][case]
    paths = class_paths(Op, kind, out_keyword=not case.startswith("no_out"))
    torch_ops = _observed(reference, *make(name))
    for label, fn in paths.items():
        d = diff(_observed(fn, *make(name)), torch_ops)
        assert d is None, f"{label} differs from torch.ops at {d}"
    if case in ("values", "keywords"):
        assert torch_ops["exception"] is None, torch_ops["exception"]


_OTHER_GUARD_CHILD = "OPCLASS_CONVENTIONS_CHILD"


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get(_OTHER_GUARD_CHILD)), reason="already the child run")
def test_class_calls_under_the_other_guard() -> None:
    """opclass picks its guard at import (``OPCLASS_GUARD``): the class calls, adapters and
    providers again in a process that runs under the other guard."""
    if opclass.guard_backend() == "native":
        other = "python"
    else:
        from opclass.core import native as _native

        if _native._built_library(_native.cache_dir()) is None:
            pytest.skip(NATIVE_GUARD_MISSING)
        other = "native"
    env = {**os.environ, "OPCLASS_GUARD": other, _OTHER_GUARD_CHILD: "1"}
    selected = "class_calls_match or kernel_style_runs or providers or supports or requires_grad"
    proc = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", selected], capture_output=True, text=True, env=env, timeout=600)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert proc.returncode == 0, f"OPCLASS_GUARD={other}: {summary}\n" + "\n".join(failed)


# --------------------------------------------------------------------------- 5. autograd


def test_the_functional_overload_passes_gradcheck(ns: str) -> None:
    Rms = rms_class(ns)
    x = torch.randn(3, 8, dtype=torch.double, requires_grad=True)
    w = torch.randn(8, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: Rms(x, w, 1e-3), (x, w))
    assert torch.autograd.gradcheck(lambda x, w: overload_of(ns, "rms", "functional")(x, w, 1e-3), (x, w))


@pytest.mark.parametrize("name", OPS)
def test_out_with_an_input_that_requires_grad_raises_torchs_error(ns: str, name: str) -> None:
    """As ``torch.mul(x, 2, out=buf)``: refused before anything is written."""
    Op = OPS[name].define(ns)
    torch_line = first_line(error_of(torch.mul, torch.ones(2, requires_grad=True), 2, out=torch.zeros(2)))
    assert torch_line.startswith("mul(): ")
    for label, call in overload_calls(Op, ns, name, "out").items():
        args = _replace(name, inputs(name), x=inputs(name)[0].requires_grad_())
        bufs = _outs(name, lambda: torch.zeros(3, 8))
        e = error_of(call, *args, **bufs)
        assert type(e) is RuntimeError and first_line(e) == f"{name}(): " + torch_line.removeprefix("mul(): "), label
        assert all(not b.any() for b in bufs.values()), label


# --------------------------------------------------------------------------- 6. compile and export


def _forms(Op: Any, name: str) -> dict[str, Callable[..., Any]]:
    """``Op``'s three calls, every Tensor (out buffers included) a positional argument."""
    n = len(OPS[name].outs)
    return {
        "Op(...)": lambda *a: Op(*a[:-n], EPS),
        "Op(..., out=)": lambda *a: Op(*a[:-n], EPS, **dict(zip(OPS[name].outs, a[-n:]))),
        "Op.inplace(...)": lambda *a: Op.inplace(*a[:-n], EPS),
    }


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", OPS)
def test_compiled_calls_give_eagers_values(ns: str, name: str, style: str) -> None:
    """``torch.compile(fullgraph=True, backend="aot_eager")``: the same results, buffers and
    written arguments as eager."""
    Op = OPS[name].define(ns, style)
    n = len(OPS[name].outs)
    for label, fn in _forms(Op, name).items():
        runs = []
        for run in (fn, torch.compile(fn, backend="aot_eager", fullgraph=True)):
            tensors = [a for a in inputs(name) if isinstance(a, Tensor)] + [torch.zeros(3, 8) for _ in range(n)]
            result = as_tuple(run(*tensors))
            runs.append(([r.clone() for r in result], tensors))
        torch.compiler.reset()
        (eager, eager_after), (compiled, compiled_after) = runs
        assert all(torch.equal(a, b) for a, b in zip(eager, compiled, strict=True)), label
        assert all(torch.equal(a, b) for a, b in zip(eager_after, compiled_after, strict=True)), label
        assert all(torch.equal(a, b) for a, b in zip(eager, expected(name, inputs(name)))), label


def _missing_out_variant() -> str | None:
    if importlib.util.find_spec("torch._library._out_variant") is None:
        return f"torch {torch.__version__} has no torch._library._out_variant"
    return missing_tags("out")


@pytest.mark.skipif(_missing_out_variant() is not None, reason=_missing_out_variant() or "")
def test_export_keeps_the_functional_ops_and_finds_their_out_variants(ns: str) -> None:
    from torch._library._out_variant import to_out_variant

    Rms, Fused = rms_class(ns), fused_class(ns)

    class Block(torch.nn.Module):
        def forward(self, x: Tensor, residual: Tensor, w: Tensor) -> Tensor:
            y, total = Fused(x, residual, w, EPS)
            return Rms(y, w, EPS) + total

    args = tuple(inputs("fused_add_rms")[:3])
    program = torch.export.export(Block(), args)
    mine = [n.target for n in program.graph.nodes if n.op == "call_function" and getattr(n.target, "namespace", None) == ns]
    assert mine == [overload_of(ns, "fused_add_rms", "functional"), overload_of(ns, "rms", "functional")]
    assert [to_out_variant(t) for t in mine] == [overload_of(ns, "fused_add_rms", "out"), overload_of(ns, "rms", "out")]
    assert torch.equal(program.module()(*args), Block()(*args))


@pytest.mark.slow
@pytest.mark.skipif(missing_tags("out") is not None, reason=f"{missing_tags('out')}: Inductor finds no .out overload to lower to")
@pytest.mark.parametrize("name", OPS)
def test_inductor_calls_the_out_overload(ns: str, name: str) -> None:
    """Inductor lowers the functional op to its ``.out`` overload, which runs the out-style kernel
    on Inductor's own buffers."""
    import torch._inductor.config
    from torch._inductor.utils import run_and_get_code

    got: list[dict[str, Tensor]] = []
    Op = OPS[name].define(ns, "out", got)
    tensors = [a for a in inputs(name) if isinstance(a, Tensor)]
    torch.compiler.reset()
    try:
        with torch._inductor.config.patch(fx_graph_cache=False):
            compiled = torch.compile(lambda *a: [2 * r for r in as_tuple(Op(*a, EPS))], backend="inductor", fullgraph=True)
            result, code = run_and_get_code(compiled, *tensors)
    finally:
        torch.compiler.reset()
    assert any(f"torch.ops.{ns}.{name}.out(" in c for c in code), code
    assert all(torch.equal(r, 2 * e) for r, e in zip(result, expected(name, inputs(name)), strict=True))
    assert got and all(set(g) == {"x", *OPS[name].written, *OPS[name].outs} for g in got)


# --------------------------------------------------------------------------- 7. definition errors


def _mutating(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True, mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor) -> None:
            x.mul_(2)


def _inplace_not_a_parameter(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", inplace=("y",)):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2


def _inplace_not_a_tensor(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", inplace=("eps",)):
        @staticmethod
        def cpu(x: Tensor, eps: float) -> Tensor:
            return x * eps


def _inplace_too_few(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", inplace=("x",)):
        @staticmethod
        def cpu(x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
            return x + residual, x - residual


def _inplace_twice_the_same(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", inplace=("x", "x")):
        @staticmethod
        def cpu(x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
            return x + residual, x - residual


def _parameter_named_out(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> Tensor:
            return x + out


def _out_kernel_without_abstract(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True, schema="(Tensor x) -> Tensor"):
        @staticmethod
        @opclass.style("out")
        def cpu(x, *, out):  # type: ignore[no-untyped-def]
            torch.mul(x, 2, out=out)


def _out_kernel_annotated_without_abstract(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True):  # its annotations are not the op's schema
        @staticmethod
        @opclass.style("out")
        def cpu(x: Tensor, *, out: Tensor) -> None:
            torch.mul(x, 2, out=out)


def _out_provider_without_abstract(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider("cpu")
        @staticmethod
        @opclass.style("out")
        def fast(x, *, out):  # type: ignore[no-untyped-def]
            torch.mul(x, 2, out=out)


def _inplace_kernel_without_inplace(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x) -> Tensor"):
        @staticmethod
        @opclass.style("inplace")
        def cpu(x):  # type: ignore[no-untyped-def]
            x.mul_(2)


def _out_kernel_misnamed(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True):
        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        @opclass.style("out")
        def cpu(x, *, result):  # type: ignore[no-untyped-def]
            torch.mul(x, 2, out=result)


def _out_kernel_positional_out(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True):
        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        @opclass.style("out")
        def cpu(x, out):  # type: ignore[no-untyped-def]
            torch.mul(x, 2, out=out)


def _out_kernel_one_buffer_for_two(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", out=True):
        @staticmethod
        def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
            return torch.empty_like(x), torch.empty_like(x)

        @staticmethod
        @opclass.style("out")
        def cpu(x, *, out):  # type: ignore[no-untyped-def]
            torch.mul(x, 2, out=out)


#: build -> (the hook the error is about, or None for the class statement; fragments of the message).
DEFINITION_ERRORS: dict[Callable[[str], None], tuple[str | None, tuple[str, ...]]] = {
    _mutating: (None, ("this one mutates x", "drop mutates_args")),
    _inplace_not_a_parameter: (None, ("inplace= names 'y', which is not a parameter (x)", "name the Tensor arguments")),
    _inplace_not_a_tensor: (None, ("inplace= names 'eps', which is float, not a Tensor", "name plain Tensor arguments only")),
    _inplace_too_few: (None, ("inplace=('x',) must name one distinct argument per output of the op (2)", "name, in order, the argument each output is written into")),
    _inplace_twice_the_same: (None, ("inplace=('x', 'x') must name one distinct argument per output", "name, in order")),
    _parameter_named_out: (None, ("the out argument 'out' would have the name of a parameter of the op", "rename the parameter 'out'")),
    _out_kernel_without_abstract: ("cpu", ("Bad.cpu(x, *, out): is written out-style, and the op has no fake kernel", "define abstract")),
    _out_kernel_annotated_without_abstract: ("cpu", ("Bad.cpu(x: Tensor, *, out: Tensor) -> None: is written out-style", "define abstract")),
    _out_provider_without_abstract: ("fast", ("Bad.fast(x, *, out): is written out-style", "define abstract")),
    _inplace_kernel_without_inplace: ("cpu", ("Bad.cpu(x): a kernel written in place needs the arguments it writes", "inplace=('x',)")),
    _out_kernel_misnamed: ("cpu", ("Bad.cpu(x, *, result): written out-style, its parameters (x, result) do not match the op's (x, out)", "write cpu(x, *, out)")),
    _out_kernel_positional_out: ("cpu", ("parameter 'out' must be keyword-only", "write cpu(x, *, out)")),
    _out_kernel_one_buffer_for_two: ("cpu", ("do not match the op's (x, out0, out1)", "write cpu(x, *, out0, out1)")),
}


@pytest.mark.parametrize("build", list(DEFINITION_ERRORS), ids=lambda build: build.__name__.strip("_"))
def test_definition_errors_name_the_class_and_the_fix(ns: str, build: Callable[[str], None]) -> None:
    hook, fragments = DEFINITION_ERRORS[build]
    with pytest.raises(OpDefinitionError) as info:
        build(ns)
    err, message = info.value, str(info.value)
    assert err.cls_name == "Bad" and "Bad" in message
    assert err.hook == hook, message
    assert err.fix and message.endswith("; " + err.fix)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    for kind in ("functional", "out", "inplace"):  # nothing registered
        op, _, overload = qualname(ns, "bad", kind).partition(".")
        with pytest.raises(RuntimeError):
            torch._C._dispatch_find_schema_or_throw(op, overload)


def test_an_unknown_style_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"opclass.style\('bogus'\): the styles are 'functional', 'out', 'inplace'"):
        opclass.style("bogus")


# --------------------------------------------------------------------------- 8. redefinition and removal


def _has(ns: str, kind: str) -> bool:
    """The dispatcher has ``ns::double`` in the convention ``kind``."""
    op, _, overload = qualname(ns, "double", kind).partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(op, overload)
    except RuntimeError:
        return False
    return True


_ALL = ("functional", "out", "inplace")


def _double(ns: str, **keywords: Any) -> Any:
    class Double(CustomOp, name=f"{ns}::double", **keywords):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

    return Double


def test_redefining_without_an_overload_removes_it(ns: str) -> None:
    old = _double(ns, out=True, inplace=("x",))
    assert [_has(ns, k) for k in _ALL] == [True, True, True]
    new = _double(ns, inplace=("x",))
    assert [_has(ns, k) for k in _ALL] == [True, False, True]
    assert not hasattr(packet(ns, "double"), "out")
    # out= is no parameter now: the class call fails as the functional op does.
    x, buf = torch.ones(2), torch.empty(2)
    assert outcome(lambda: new(x, out=buf)) == outcome(lambda: overload_of(ns, "double", "functional")(x, out=buf))
    assert outcome(lambda: new(x, out=buf))[0] == "RuntimeError"
    assert first_line(error_of(old.out, x, out=buf)) == f"{ns}::double.out was removed; define its class again to use it"
    y = torch.ones(2)
    assert new.inplace(y) is y and y.tolist() == [2.0, 2.0]
    again = _double(ns, out=True, inplace=("x",))
    assert [_has(ns, k) for k in _ALL] == [True, True, True]
    assert again(x, out=buf) is buf and buf.tolist() == [2.0, 2.0]
    _double(ns)
    assert [_has(ns, k) for k in _ALL] == [True, False, False]
    assert first_line(error_of(again.inplace, x)) == f"{ns}::double_ was removed; define its class again to use it"


_REDEFINE_THEN_REMOVE = """
import torch, opclass
from torch import Tensor

def define(**keywords):
    class Double(opclass.CustomOp, name="redefined::double", **keywords):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2
    return Double

define(out=True, inplace=("x",))
opclass.remove(define(out=True))
define(out=True, inplace=("x",))
define(inplace=("x",))
Double = define(out=True, inplace=("x",))
assert Double.inplace(torch.ones(2)).tolist() == [2.0, 2.0]
opclass.remove_namespace("redefined")
print("removed")
"""


@pytest.mark.slow
def test_redefining_and_removing_leaves_torchs_registry_whole() -> None:
    """Overloads dropped and added back by redefinitions, then removed: torch's operator registry
    stays whole. (In a subprocess: where it does not, the process aborts, as torch 2.13 to 2.15
    did when the in-place op was an overload ``ns::op.inplace`` beside ``ns::op.out``.)"""
    proc = subprocess.run([sys.executable, "-c", _REDEFINE_THEN_REMOVE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "removed", proc.stderr[-2000:]


def test_remove_takes_every_overload(ns: str) -> None:
    Double = _double(ns, out=True, inplace=("x",))
    opclass.remove(Double)
    assert [_has(ns, k) for k in _ALL] == [False, False, False]
    for call in (lambda: Double(torch.ones(2)), lambda: Double.out(torch.ones(2), out=torch.empty(2)), lambda: Double.inplace(torch.ones(2))):
        assert first_line(error_of(call)).endswith("was removed; define its class again to use it")


# --------------------------------------------------------------------------- 9. deployment, debug mode, the Inductor trap


@pytest.mark.parametrize("style", STYLES)
def test_decompositions_cover_every_overload(ns: str, style: str) -> None:
    """A decomposed program calls no op of the class, whichever overload it was exported with."""

    class Rms(CustomOp, name=f"{ns}::rms", out=True, inplace=("x",)):
        cpu = _rms_kernel(style, [])

        @staticmethod
        def abstract(x: Tensor, w: Tensor, eps: float) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def reference(x: Tensor, w: Tensor, eps: float) -> Tensor:
            return rms_norm(x, w, eps)

    class Program(torch.nn.Module):
        def forward(self, x: Tensor, w: Tensor) -> Tensor:
            buf = torch.empty_like(x)
            Rms(x, w, EPS, out=buf)
            donated = x.clone()
            Rms.inplace(donated, w, EPS)
            return Rms(x, w, EPS) + buf + donated

    x, w, _ = inputs("rms")
    table = opclass.decompositions(Rms, Rms.out, Rms.inplace, base=torch.export.default_decompositions())
    assert {Rms.op, Rms.out.op, Rms.inplace.op} <= set(table)
    decomposed = torch.export.export(Program(), (x, w)).run_decompositions(table)
    targets = {str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"}
    assert not any(ns in t for t in targets), targets
    torch.testing.assert_close(decomposed.module()(x, w), 3 * rms_norm(x, w, EPS))


def test_debug_mode_checks_every_overload(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Debug mode holds each overload's kernel to its contract: a write the overload does not
    declare is named, on the functional op and on the .out overload alike."""
    monkeypatch.setenv("OPCLASS_DEBUG", "1")

    class Leaky(CustomOp, name=f"{ns}::leaky", out=True, inplace=("x",)):
        @staticmethod
        def cpu(x: Tensor, w: Tensor) -> Tensor:
            w.add_(0)  # writes w, which no overload declares
            return x * w

    x, w = torch.ones(2), torch.ones(2)
    for call in (lambda: Leaky(x, w), lambda: Leaky(x, w, out=torch.empty(2)), lambda: Leaky.inplace(x.clone(), w)):
        with pytest.raises(RuntimeError, match="wrote to 'w'"):
            call()


def test_out_with_a_defaulted_parameter_warns_of_inductors_bug(ns: str) -> None:
    """torch 2.13 to 2.15's Inductor passes a defaulted argument twice to the .out overload it
    lowers to: the class statement says so, naming the parameters; without a default it is silent."""
    with pytest.warns(UserWarning, match=r"default value twice.*\('eps'\)") if missing_tags("out") is None else contextlib.nullcontext():

        class Defaulted(CustomOp, name=f"{ns}::defaulted", out=True):
            @staticmethod
            def cpu(x: Tensor, eps: float = 1e-6) -> Tensor:
                return x + eps

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rms_class(ns)


def test_a_provider_added_from_outside_serves_every_overload(ns: str) -> None:
    """add_provider redefines the class statement: the .out overload and the in-place op get the
    provider too (adapted to each), and lose it with remove_provider."""
    Rms = rms_class(ns)
    x, w, _ = inputs("rms")

    def halved(x: Tensor, w: Tensor, eps: float) -> Tensor:
        return rms_norm(x, w, eps) / 2

    opclass.add_provider(Rms, "halved", halved, "cpu")
    with opclass.use_providers({Rms: ["halved"]}):
        buf, donated = torch.empty(0), x.clone()
        for got in (Rms(x, w, EPS), Rms(x, w, EPS, out=buf), Rms.inplace(donated, w, EPS)):
            torch.testing.assert_close(got, rms_norm(x, w, EPS) / 2)
    opclass.remove_provider(Rms, "halved")
    torch.testing.assert_close(Rms(x, w, EPS, out=torch.empty(0)), rms_norm(x, w, EPS))


def test_a_class_attribute_named_as_an_overload_is_refused(ns: str) -> None:
    with pytest.raises(OpDefinitionError, match="rename the class attribute out"):

        class Clash(CustomOp, name=f"{ns}::clash", out=True):
            out = "a helper of the author's"

            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return 2 * x


def test_an_out_overload_over_the_dispatchers_64_arguments_is_refused(ns: str) -> None:
    params = ", ".join(f"a{i}: Tensor" for i in range(64))
    namespace: dict[str, Any] = {"Tensor": Tensor}
    exec(f"def cpu({params}) -> Tensor:\n    return a0.clone()\n", namespace)  # noqa: S102 - 64 parameters
    with pytest.raises(OpDefinitionError, match="64 arguments and 1 out buffers, more than the dispatcher's 64"):
        type(CustomOp)("Wide", (CustomOp,), {"cpu": staticmethod(namespace["cpu"])}, name=f"{ns}::wide", out=True)
