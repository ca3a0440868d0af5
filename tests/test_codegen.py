"""The generated per-class call function: source, names, signature, tracebacks, argument errors."""

from __future__ import annotations

import inspect
import linecache
import subprocess
import sys
import textwrap
import traceback

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp
from opclass.core import native as _native
from opclass.callpath.classcall import call_function

from _marks import needs_native


def _make(ns: str) -> type[CustomOp]:
    class Axpy(CustomOp, name=f"{ns}::axpy"):
        """a * x + y."""

        @staticmethod
        def cpu(x: Tensor, y: Tensor, a: float = 2.0, *, clamp: bool = False) -> Tensor:
            out = a * x + y
            return out.clamp(-1, 1) if clamp else out

    return Axpy


def test_source_is_generated_once_and_visible(ns: str) -> None:
    Axpy = _make(ns)
    call = call_function(Axpy)
    source = inspect.getsource(call)
    filename = call.__code__.co_filename
    assert filename.startswith(f"<opclass generated {ns}::axpy ") and filename in linecache.cache
    assert call.__module__ == __name__
    assert "(Tensor x, Tensor y, float a=2.0, *, bool clamp=False) -> Tensor" in (call.__doc__ or "")
    # objects arrive as closure locals, not as repr'd source
    cells = dict(zip(call.__code__.co_freevars, [c.cell_contents for c in call.__closure__ or ()]))
    assert cells["_op"] is Axpy.op._op  # the OpOverload's C callable
    assert cells["_k_cpu"] is Axpy.record.kernels["cpu"].checked
    if _native.CALL_IS_NATIVE:
        # OpMeta's C call passes the arguments: the op's own signature.
        assert source.strip().startswith("def Axpy(x, y, a=_default_a, *, clamp=_default_clamp):")
        assert source.rstrip().endswith("return _op(x, y, a, clamp=clamp)")  # anything not plain eager
        assert call.__qualname__ == f"{Axpy.__qualname__}.__call__"
        assert call.__defaults__ == (2.0,) and call.__kwdefaults__ == {"clamp": False}
    else:
        # The class's __new__: nothing fails to bind (the dispatcher's errors instead of Python's).
        assert source.strip().startswith("def Axpy(_cls, x=_M, y=_M, a=_M, /, *_a, clamp=_M, **_k):")
        assert source.rstrip().endswith("return _op(x, y, a, clamp=clamp)")
        assert call.__qualname__ == f"{Axpy.__qualname__}.__new__"
        assert Axpy.__dict__["__new__"].__func__ is call
        assert cells["_default_a"] == 2.0 and cells["_default_clamp"] is False


@pytest.mark.parametrize("guard", [pytest.param("native", marks=needs_native), "python"])
def test_fast_path_source_per_guard(ns: str, guard: str) -> None:
    previous = opclass.guard_backend()
    _native.load(guard)
    try:
        source = inspect.getsource(call_function(_make(ns)))
    finally:
        _native.load(previous)
    if guard == "native":
        assert "_g = _guard(_spec, x, y)" in source  # one call classifies both Tensors
    else:
        # One C call compares both Tensors with the op's recorded plain calls; the exact check on a miss.
        assert "if not _e[0](x, y):" in source and "_miss(_s, (x, y,), _devices)" in source
        assert "_keys(" not in source
    assert "type(a) is float" in source and "type(clamp) is bool" in source
    assert "_out = _u_cpu(x, y, a, clamp=clamp)" in source
    assert source.rstrip().endswith("return _op(x, y, a, clamp=clamp)")


def test_class_signature_and_doc(ns: str) -> None:
    Axpy = _make(ns)
    sig = inspect.signature(Axpy)
    assert list(sig.parameters) == ["x", "y", "a", "clamp"]
    assert sig.parameters["a"].default == 2.0
    assert sig.parameters["clamp"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.return_annotation is Tensor
    doc = Axpy.__doc__ or ""
    assert doc.startswith("a * x + y.") and f"``{ns}::axpy``" in doc


def test_defaults_and_keywords_reach_the_kernel(ns: str) -> None:
    Axpy = _make(ns)
    x, y = torch.full((2,), 3.0), torch.ones(2)
    torch.testing.assert_close(Axpy(x, y), 2 * x + y)
    torch.testing.assert_close(Axpy(x, y, 0.5), 0.5 * x + y)
    torch.testing.assert_close(Axpy(x, y=y, a=1.0, clamp=True), torch.ones(2))
    torch.testing.assert_close(Axpy(x, y, clamp=True), Axpy.op(x, y, clamp=True))


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((torch.ones(1),), {}),  # missing required
        ((torch.ones(1), torch.ones(1), 1.0, True), {}),  # kwarg-only passed positionally
        ((torch.ones(1), torch.ones(1)), {"beta": 1}),  # unknown keyword
        ((torch.ones(1),), {"x": torch.ones(1), "y": torch.ones(1)}),  # duplicate
    ],
)
def test_binding_errors_match_the_dispatcher(ns: str, args: tuple, kwargs: dict) -> None:
    Axpy = _make(ns)
    with pytest.raises(Exception) as ours:
        Axpy(*args, **kwargs)
    with pytest.raises(Exception) as theirs:
        Axpy.op(*args, **kwargs)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_traceback_shows_generated_call_and_user_kernel(ns: str) -> None:
    class Boom(CustomOp, name=f"{ns}::boom"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            raise ValueError("kernel failed on purpose")

    # A keyword argument always goes through the generated function.
    with pytest.raises(ValueError, match="on purpose") as info:
        Boom(x=torch.ones(1))
    text = "".join(traceback.format_exception(info.value))
    assert "<opclass generated" in text and "_out = _u_cpu(x)" in text
    assert 'raise ValueError("kernel failed on purpose")' in text
    # Positional: with the native guard the class call's C entry calls the kernel itself, so the
    # caller's frame is followed by the kernel's; with the Python guard, the generated function's.
    with pytest.raises(ValueError, match="on purpose") as info:
        Boom(torch.ones(1))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].line == 'raise ValueError("kernel failed on purpose")'
    assert frames[-2].name == ("test_traceback_shows_generated_call_and_user_kernel" if Boom._opclass_fast else "Boom")
    assert (Boom._opclass_fast is not None) == (opclass.guard_backend() == "native")


@pytest.mark.slow
def test_import_and_definition_do_not_import_dynamo() -> None:
    code = textwrap.dedent(
        """
        import sys, torch
        from torch import Tensor
        import opclass
        class Op(opclass.CustomOp, name="noimport::op"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)
        Op(torch.ones(1))
        print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
