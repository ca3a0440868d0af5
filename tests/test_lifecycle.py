"""An op's lifecycle: redefining a name (the same class statement again, another class taking it, a
new schema), older class objects calling the live op, and removal by class or by qualname."""

from __future__ import annotations

import gc
import inspect
import warnings
from typing import Any

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp


def _define_scale(ns: str, factor: float) -> Any:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * factor

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    return Scale


# --------------------------------------------------------------------------- redefinition


def test_redefinition_replaces_op(ns: str) -> None:
    Old = _define_scale(ns, 2.0)
    New = _define_scale(ns, 3.0)
    assert New is not Old
    x = torch.ones(2)
    torch.testing.assert_close(New(x), torch.full((2,), 3.0))
    # torch.ops sees the new definition.
    torch.testing.assert_close(getattr(torch.ops, ns).scale(x), torch.full((2,), 3.0))
    torch.testing.assert_close(getattr(torch.ops, ns).scale.default(x), torch.full((2,), 3.0))
    # The old class object now calls the new kernels.
    torch.testing.assert_close(Old(x), torch.full((2,), 3.0))
    assert Old.qualname == New.qualname
    assert Old.op is New.op


def test_redefinition_of_the_same_class_is_silent(ns: str) -> None:
    """The same class statement run again (a notebook cell, a reloaded module) replaces its op
    without a word."""
    _define_scale(ns, 2.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _define_scale(ns, 3.0)
    assert [str(w.message) for w in caught] == []


def test_another_class_taking_the_name_warns(ns: str) -> None:
    """Two different classes with the same ``name=`` replace each other: a warning names both and
    points at the class statement that takes the name over."""
    Old = _define_scale(ns, 2.0)
    with pytest.warns(UserWarning) as caught:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        class Other(CustomOp, name=f"{ns}::scale"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x * 5

    assert len(caught) == 1
    old = f"{__name__}._define_scale.<locals>.Scale"
    new = f"{__name__}.test_another_class_taking_the_name_warns.<locals>.Other"
    assert str(caught[0].message) == (
        f"{new} replaces the op {ns}::scale defined by {old}: two classes give the same name. "
        "Give one of them another name= (or call opclass.remove(Scale) first if replacing it is intended)."
    )
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
    # It still replaces the op, as before.
    torch.testing.assert_close(Old(torch.ones(1)), torch.full((1,), 5.0))
    assert Other.op is Old.op


def test_redefinition_with_new_schema(ns: str) -> None:
    old = _define_scale(ns, 2.0)  # noqa: F841 - alive: a collected class warns no one

    with pytest.warns(UserWarning, match="two classes give the same name"):  # another class statement

        class Scale(CustomOp, name=f"{ns}::scale"):
            @staticmethod
            def cpu(x: Tensor, factor: float) -> Tensor:
                return x * factor

    assert Scale.schema == "(Tensor x, float factor) -> Tensor"
    torch.testing.assert_close(getattr(torch.ops, ns).scale(torch.ones(1), 5.0), torch.full((1,), 5.0))


def test_redefinition_old_class_under_compile_uses_new_kernel(ns: str) -> None:
    Old = _define_scale(ns, 2.0)
    New = _define_scale(ns, 4.0)  # noqa: F841 - kept alive: see the next test for when it is not
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: Old(t) + 0, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 4.0))
    torch._dynamo.reset()


def test_redefinition_old_class_works_after_new_class_is_collected(ns: str) -> None:
    """The op stays registered after its (newest) class object is garbage collected; an older
    class of the same name should keep calling it, as torch.ops does."""
    Old = _define_scale(ns, 2.0)
    _define_scale(ns, 4.0)  # the new class object is dropped at once
    gc.collect()
    x = torch.ones(2)
    torch.testing.assert_close(getattr(torch.ops, ns).scale(x), torch.full((2,), 4.0))
    torch.testing.assert_close(Old(x), torch.full((2,), 4.0))


# --------------------------------------------------------------------------- removal


def test_remove_drops_op(ns: str) -> None:
    Scale = _define_scale(ns, 2.0)
    assert hasattr(getattr(torch.ops, ns), "scale")
    opclass.remove(Scale)
    assert not hasattr(getattr(torch.ops, ns), "scale")
    with pytest.raises(RuntimeError, match="removed"):
        Scale(torch.ones(2))
    # Defining it again brings it back, and the old class follows.
    _define_scale(ns, 5.0)
    torch.testing.assert_close(getattr(torch.ops, ns).scale(torch.ones(1)), torch.full((1,), 5.0))
    torch.testing.assert_close(Scale(torch.ones(1)), torch.full((1,), 5.0))


def test_remove_by_qualname(ns: str) -> None:
    Scale = _define_scale(ns, 2.0)
    opclass.remove(f"{ns}::scale")
    assert not hasattr(getattr(torch.ops, ns), "scale")
    with pytest.raises(RuntimeError):
        Scale(torch.ones(2))
