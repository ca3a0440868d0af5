"""Ops that write to their arguments: which arguments ``mutates_args`` marks (a generator,
``"unknown"``), version counters, ``Tag.inplace`` / ``Tag.out`` ops returning what they wrote, and
autograd seeing the writes."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp
from opclass._harness import call_paths

from _errors import error_of, first_line
from _paths import assert_paths_agree_on
from _versions import needs_tag


# --------------------------------------------------------------------------- mutates_args


def test_mutates_args_from_a_generator(ns: str) -> None:
    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=(n for n in ["out"])):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)

    assert Fill.schema == "(Tensor x, Tensor(a1!) out) -> ()"

    class Variant(Fill, name=f"{ns}::fill_variant"):
        pass  # inherits the keyword: the generator was read once, for both

    assert Variant.schema == "(Tensor x, Tensor(a1!) out) -> ()"
    out = torch.zeros(2)
    Fill(torch.ones(2), out)
    assert out.tolist() == [1.0, 1.0] and out._version == 2  # copy_ and opclass's bump, as via torch.ops
    assert_paths_agree_on(Fill, torch.ones(2), torch.zeros(2))


def test_mutates_args_unknown_marks_every_tensor_argument(ns: str) -> None:
    class Anything(CustomOp, name=f"{ns}::anything", mutates_args="unknown"):
        @staticmethod
        def cpu(x: Tensor, ys: list[Tensor], z: Optional[Tensor], k: float) -> None:
            x.add_(k)

    expected = torch.library.infer_schema(Anything.record.kernel_for("cpu").user, mutates_args="unknown")
    assert Anything.schema == expected == "(Tensor(a0!) x, Tensor(a1!)[] ys, Tensor(a2!)? z, float k) -> ()"
    seen = assert_paths_agree_on(Anything, torch.zeros(2), [torch.ones(1)], None, 2.0)
    assert seen["inputs_after"][0]["values"].tolist() == [2.0, 2.0]
    assert seen["inputs_after"][0]["version"] == 2  # add_ and the bump every written argument gets


def test_mutates_args_unknown_with_a_schema(ns: str) -> None:
    class Explicit(CustomOp, name=f"{ns}::explicit", mutates_args="unknown", schema="(Tensor(a!) x) -> ()"):
        @staticmethod
        def cpu(x):
            x.zero_()

    assert Explicit.schema == "(Tensor(a!) x) -> ()"


# --------------------------------------------------------------------------- version counters


def test_mutable_op_bumps_version_of_mutated_args_only(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("dst", "extra")):
        @staticmethod
        def cpu(dst: Tensor, src: Tensor, extra: Tensor, other: Tensor) -> None:
            dst.add_(src)
            extra.zero_()

    dst, src, extra, other = torch.zeros(3), torch.ones(3), torch.ones(3), torch.ones(3)
    before = {name: t._version for name, t in (("dst", dst), ("src", src), ("extra", extra), ("other", other))}
    assert AddInto(dst, src, extra, other) is None
    assert dst._version > before["dst"]
    assert extra._version > before["extra"]
    assert src._version == before["src"]
    assert other._version == before["other"]
    torch.testing.assert_close(dst, torch.ones(3))


def test_mutable_op_version_bump_is_seen_by_autograd(ns: str) -> None:
    """A tensor saved for backward and then mutated by the op makes backward fail, as for x.add_()."""

    class AddOne(CustomOp, name=f"{ns}::add_one_", mutates_args=("x",)):
        @staticmethod
        def cpu(x: Tensor) -> None:
            x.add_(1)

    a = torch.randn(3, requires_grad=True)
    b = a * 1
    c = b * b  # saves b
    with torch.no_grad():  # with grad on, mutating b (which requires grad) is an error
        AddOne(b)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_mutable_kwarg_only_arg_version_bumped(ns: str) -> None:
    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=("out",)):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> None:
            out.copy_(x)

    x, out = torch.arange(3.0), torch.zeros(3)
    v_x, v_out = x._version, out._version
    Fill(x, out=out)
    assert out._version > v_out and x._version == v_x
    torch.testing.assert_close(out, x)


# --------------------------------------------------------------------------- Tag.inplace and Tag.out: returning what was written


@needs_tag("inplace")
def test_inplace_op_returns_first_arg(ns: str) -> None:
    class Sin_(CustomOp, name=f"{ns}::sin_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.sin_()

    x = torch.ones(2)
    v = x._version
    assert Sin_(x) is x
    assert x._version > v
    torch.testing.assert_close(x, torch.ones(2).sin())


@needs_tag("inplace")
def test_inplace_kernel_must_return_its_first_arg(ns: str) -> None:
    class BadSin_(CustomOp, name=f"{ns}::bad_sin_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            x.sin_()
            return x.clone()

    with pytest.raises(RuntimeError, match="must return its first argument"):
        BadSin_(torch.ones(2))


def _sin_out(ns: str) -> Any:
    class SinOut(CustomOp, name=f"{ns}::sin.out", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            return torch.sin(x, out=out)

    return SinOut


@needs_tag("out")
def test_out_op_returns_the_out_tensor(ns: str) -> None:
    SinOut = _sin_out(ns)
    x, out = torch.arange(3.0), torch.empty(3)
    v = out._version
    assert SinOut(x, out=out) is out
    assert out._version > v
    torch.testing.assert_close(out, torch.sin(x))


@needs_tag("out")
def test_out_op_raises_under_grad(ns: str) -> None:
    SinOut = _sin_out(ns)
    x = torch.arange(3.0, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        SinOut(x, out=torch.empty(3))
    with torch.no_grad():  # fine without grad mode
        out = torch.empty(3)
        assert SinOut(x, out=out) is out


@needs_tag("out")
def test_out_kernel_must_return_out(ns: str) -> None:
    class BadOut(CustomOp, name=f"{ns}::bad.out", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            out.copy_(x)
            return out.clone()

    with pytest.raises(RuntimeError, match="must return its mutable keyword-only arguments"):
        BadOut(torch.ones(2), out=torch.empty(2))


@needs_tag("inplace", "out")
def test_explicit_schema_following_tag_rules_works(ns: str) -> None:
    class Scale_(CustomOp, name=f"{ns}::scale_", schema="(Tensor(a!) x, float k) -> Tensor(a!)", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def default(x, k):
            return x.mul_(k)

    class AddOut(CustomOp, name=f"{ns}::add_out", schema="(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def default(x, *, out):
            return out.copy_(x + 1)

    x = torch.ones(2)
    assert Scale_(x, 3.0) is x and x.tolist() == [3.0, 3.0]
    out = torch.empty(2)
    assert AddOut(torch.ones(2), out=out) is out and out.tolist() == [2.0, 2.0]
    assert_paths_agree_on(Scale_, torch.ones(2), 3.0)


def test_a_mutating_op_returning_its_argument_points_at_tag_inplace(ns: str) -> None:
    class Scale_(CustomOp, name=f"{ns}::scale_", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, k: float) -> Tensor:
            return x.mul_(k)

    for label, fn in call_paths(Scale_).items():
        line = first_line(error_of(fn, torch.ones(2), 2.0))
        assert line.startswith(f"{ns}::scale_ (Scale_.default): the output of this custom operator"), label
        fix = "tags=torch.Tag.inplace" if hasattr(torch.Tag, "inplace") else "return nothing instead (-> None)"
        assert fix in line, label


# --------------------------------------------------------------------------- a logger on parameters


def _twin_log_tensor(ns: str, logged: list[str]) -> Any:
    @torch.library.custom_op(f"{ns}_twin::log_tensor", mutates_args=("x",))
    def log_tensor(x: Tensor, name: str) -> None:
        logged.append(name)

    log_tensor.register_fake(lambda x, name: None)
    return log_tensor


def test_a_logger_declaring_a_write_runs_on_parameters_as_custom_op_runs_it(ns: str) -> None:
    """torchao's quant_logger pattern: an op declares that it writes to x so that compile keeps it
    in the graph, and is called on nn.Parameters. It runs, in eager, compile, export and opcheck,
    as the custom_op twin does; only a Tensor with autograd history is refused (custom_op gives it
    a silently wrong gradient)."""
    from _twins import failures, seen

    logged: list[str] = []

    class LogTensor(CustomOp, name=f"{ns}::log_tensor", mutates_args=("x",)):
        @staticmethod
        def default(x: Tensor, name: str) -> None:
            logged.append(name)

        @staticmethod
        def abstract(x: Tensor, name: str) -> None:
            return None

    twin = _twin_log_tensor(ns, logged)
    try:
        calls = [lambda: ((torch.nn.Parameter(torch.randn(3)), "w"), {}), lambda: ((torch.randn(3), "x"), {})]
        mine = seen(LogTensor, calls)
        logged_mine = logged[:]
        del logged[:]
        theirs = seen(twin, calls)
        assert mine == theirs
        assert mine["schema"] == "(Tensor(a0!) x, str name) -> ()"
        assert not failures(mine), failures(mine)
        assert mine["eager 0"] is None and logged_mine == logged and logged_mine.count("w") >= 3

        # A layer's forward logs its weight; gradients as without the logger, eager and compiled.
        for op in (LogTensor, twin):
            torch.manual_seed(0)
            layer = torch.nn.Linear(3, 2)
            x = torch.randn(4, 3)

            def forward(x: Tensor) -> Tensor:
                op(layer.weight, "weight")
                return layer(x)

            forward(x).sum().backward()
            eager = layer.weight.grad.clone()
            layer.weight.grad = None
            torch.compile(forward, backend="aot_eager", fullgraph=True)(x).sum().backward()
            torch.compiler.reset()
            torch.testing.assert_close(layer.weight.grad, eager)
            torch.testing.assert_close(eager, torch.ones(2, 1) * x.sum(0))

        # A write to a Parameter saved earlier: both raise the same autograd error at backward.
        errors = []
        for op in (LogTensor, twin):
            w = torch.nn.Parameter(torch.ones(3))
            y = w * w
            op(w, "w")
            with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
                y.sum().backward()
            errors.append(str(info.value).splitlines()[0])
        assert errors[0] == errors[1]

        # A Tensor with history (an activation): the logger leaves it as it was, so it runs too,
        # and its gradient is right.
        a = torch.ones(3, requires_grad=True)
        h = a * 2
        LogTensor(h, "h")
        (h * h).sum().backward()
        assert a.grad is not None and a.grad.tolist() == [8.0] * 3
    finally:
        twin._lib._destroy()


def test_alias_annotations_declare_the_written_arguments_an_op_returns(ns: str) -> None:
    """``Annotated[Tensor, opclass.Alias("x")]``: the schema says the op returns its written
    argument, without a schema string; every route returns the arguments themselves, and a kernel
    that returns anything else is named."""
    class AddBoth(CustomOp, name=f"{ns}::add_both", mutates_args=("x", "y")):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> tuple[Annotated[Tensor, opclass.Alias("x")], Annotated[Tensor, opclass.Alias("y")]]:
            x.add_(1)
            y.add_(2)
            return x, y

    assert AddBoth.schema == "(Tensor(a0!) x, Tensor(a1!) y) -> (Tensor(a0!), Tensor(a1!))"
    for call in call_paths(AddBoth).values():
        x, y = torch.zeros(1), torch.zeros(1)
        got = call(x, y)
        assert got[0] is x and got[1] is y and (x.item(), y.item()) == (1.0, 2.0)

    class Swapped(CustomOp, name=f"{ns}::swapped", mutates_args=("x", "y")):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> tuple[Annotated[Tensor, opclass.Alias("x")], Annotated[Tensor, opclass.Alias("y")]]:
            return y, x

    for call in call_paths(Swapped).values():
        with pytest.raises(RuntimeError, match=r"returns the arguments it writes \(x, y\), in that order"):
            call(torch.zeros(1), torch.zeros(1))


@pytest.mark.parametrize(
    ("returns", "mutates", "problem"),
    [
        ("Annotated[Tensor, opclass.Alias('x')]", (), "declares a view"),
        ("Annotated[Tensor, opclass.Alias('k')]", ("x",), "'k' is no Tensor parameter"),
        ("Annotated[Tensor, opclass.Alias('z')]", ("x",), "'z' is no Tensor parameter"),
        ("Annotated[float, opclass.Alias('x')]", ("x",), "annotates float, not a Tensor"),
    ],
)
def test_an_alias_annotation_that_cannot_hold_is_refused(ns: str, returns: str, mutates: tuple[str, ...], problem: str) -> None:
    namespace: dict[str, Any] = {"Annotated": Annotated, "Tensor": Tensor, "opclass": opclass, "torch": torch}
    exec(f"def cpu(x: Tensor, k: float) -> {returns}:\n    return x\n", namespace)  # noqa: S102 - the annotation under test
    with pytest.raises(opclass.OpDefinitionError, match=problem):
        type(CustomOp)("Bad", (CustomOp,), {"cpu": staticmethod(namespace["cpu"])}, name=f"{ns}::bad", mutates_args=mutates)
