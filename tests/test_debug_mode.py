"""Debug mode (``OPCLASS_DEBUG=1`` when an op is defined): a kernel that writes to an input not in
``mutates_args`` raises on every call path; declared writes pass; ops defined without it are
unwrapped (nothing to pay)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from opclass import CustomOp
from opclass._harness import call_paths, diff, observe


def _scale(ns: str, mutates: tuple[str, ...] = ()) -> Any:
    class Scale(CustomOp, name=f"{ns}::scale", mutates_args=mutates):
        @staticmethod
        def cpu(x: Tensor, y: Tensor, gain: float) -> Tensor:
            x.mul_(gain)
            return y * gain

    return Scale


@pytest.fixture
def debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "1")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("context", ["grad", "no_grad"])
def test_undeclared_write_raises_on_every_path(ns: str, debug: None, requires_grad: bool, context: str) -> None:
    cls = _scale(ns)
    assert "fast path: cpu" in repr(cls.record)  # debug mode keeps the fast path: it runs the check too
    seen = {}
    for label, fn in call_paths(cls).items():
        with torch.no_grad() if context == "no_grad" else torch.enable_grad():
            seen[label] = observe(fn, (torch.ones(3), torch.ones(3, requires_grad=requires_grad), 2.0), {})
    *fast, reference = seen
    for label in fast:
        assert diff(seen[label], seen[reference]) is None, (label, diff(seen[label], seen[reference]))
    assert seen[reference]["exception"] == (
        "RuntimeError",
        f"{ns}::scale (Scale.cpu) wrote to 'x' (its version counter moved), but the op does not declare that it mutates 'x', "
        "so torch.compile, autograd and functionalization assume it is unchanged: add mutates_args=('x',) to the class "
        "statement (class Scale(CustomOp, ..., mutates_args=('x',))), or write to a copy instead (x = x.clone() first)",
    )


def test_declared_write_passes(ns: str, debug: None) -> None:
    cls = _scale(ns, mutates=("x",))
    x = torch.ones(3)
    out = cls(x, torch.ones(3), 2.0)
    assert torch.equal(x, torch.full((3,), 2.0)) and torch.equal(out, torch.full((3,), 2.0))
    assert x._version == 2  # the kernel's write and the op's declared bump


def test_inference_tensors_are_not_watched(ns: str, debug: None) -> None:
    cls = _scale(ns)
    with torch.inference_mode():
        x = torch.ones(3)
        cls(x, torch.ones(3), 2.0)  # no version counter to read: nothing to report
    assert torch.equal(x, torch.full((3,), 2.0))


def test_off_by_default(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPCLASS_DEBUG", raising=False)
    cls = _scale(ns)
    kernel = cls.record.kernel_for("cpu")
    assert kernel.user is cls.__dict__["cpu"].__func__  # the user's function itself: no wrapper
    x = torch.ones(3)
    cls(x, torch.ones(3), 2.0)  # silently wrong, as without opclass; opclass.testing reports it
    assert x._version == 1


def test_zero_means_off(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "0")
    cls = _scale(ns)
    cls(torch.ones(3), torch.ones(3), 2.0)


def test_an_alias_of_a_declared_argument_is_not_reported(ns: str, debug: None) -> None:
    """A view of the declared argument shares its version counter: the declared write moves it."""

    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def cpu(out: Tensor, x: Tensor) -> None:
            out.add_(x)

    base = torch.ones(4)
    AddInto(base, base[:4])
    AddInto.op(base, base)
    assert torch.equal(base, torch.full((4,), 4.0))
