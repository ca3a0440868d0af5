"""torch's errors raised while a hook runs name the op and the hook (and the fix, where there is
one) on every call path, with the exception type torch gave; a user's own ``raise`` passes
unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths

from _errors import compiled_call, error_of, first_line


def _each_path(op: Any, *args: Any, expected: type[BaseException]) -> list[str]:
    """The first line of the error each eager call path raises, all of type ``expected``."""
    lines = []
    for label, fn in call_paths(op).items():
        e = error_of(fn, *args)
        assert type(e) is expected, (label, type(e), e)
        lines.append(first_line(e))
    assert len(set(lines)) == 1, lines
    return lines


@pytest.mark.parametrize("saved", ["list", "shape"])
def test_save_for_backward_given_no_tensor_names_setup_context(ns: str, saved: str) -> None:
    class Save(CustomOp, name=f"{ns}::save"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward([inputs[0]] if saved == "list" else inputs[0].shape)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

    kind = "list" if saved == "list" else "torch.Size"
    (line,) = set(_each_path(Save, torch.ones(2, requires_grad=True), expected=TypeError))
    assert line == (
        f"{ns}::save (Save.setup_context): save_for_backward can only save variables, but argument 0 is of type {kind}; "
        "save Tensors (or None) only, and keep any other value on ctx (ctx.shape = x.shape)"
    )


def _numpy_double(ns: str, raise_own: bool = False) -> Any:
    class Double(CustomOp, name=f"{ns}::double"):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            if raise_own:
                raise ValueError("my own message")
            return torch.from_numpy(x.numpy() * 2)

    return Double


def test_a_dtype_autocast_gives_a_numpy_kernel_names_the_kernel_and_autocast(ns: str) -> None:
    op = _numpy_double(ns)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (line,) = set(_each_path(op, torch.ones(2), expected=TypeError))
    assert line == (
        f"{ns}::double (Double.cpu), given torch.bfloat16 by Double.autocast: Got unsupported ScalarType BFloat16; "
        "the kernel cannot take torch.bfloat16: leave cpu out of the op's autocast, or convert inside the kernel (x.float())"
    )


def test_a_users_own_error_passes_unchanged(ns: str) -> None:
    op = _numpy_double(ns, raise_own=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert set(_each_path(op, torch.ones(2), expected=ValueError)) == {"my own message"}


def test_traceable_on_a_numpy_kernel_names_the_hook_and_the_fix(ns: str) -> None:
    class Np(CustomOp, name=f"{ns}::np"):
        traceable = True

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return torch.from_numpy(np.exp(x.numpy()))

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    torch._dynamo.reset()
    e = error_of(compiled_call(Np), torch.ones(2))
    inner = getattr(e, "inner_exception", e)  # torch.compile wraps it in BackendCompilerFailed
    assert type(inner) is RuntimeError, (type(e), type(inner))
    assert first_line(inner) == (
        f"{ns}::np (Np.traceable), tracing the kernel into torch ops: .numpy() is not supported for tensor subclasses; "
        "a traceable kernel is torch ops and Triton launches only (not NumPy, not C++): drop traceable (the op stays one node), "
        "or write the kernel in torch ops"
    )


def test_an_op_with_no_kernel_for_the_device_names_what_it_has(ns: str) -> None:
    class OnlyCuda(CustomOp, name=f"{ns}::only_cuda"):
        @staticmethod
        def cuda(x: Tensor) -> Tensor:
            return x * 2

    (line,) = set(_each_path(OnlyCuda, torch.ones(2), expected=NotImplementedError))
    assert line == f"{ns}::only_cuda (OnlyCuda) has no kernel for cpu tensors (it has OnlyCuda.cuda): define OnlyCuda.cpu, or OnlyCuda.default for every device type"
    assert repr(OnlyCuda.record).endswith("fast path: cuda>")  # the stand-in is no kernel of the plan's


def test_an_autograd_body_under_inference_mode_names_the_hook_and_the_fix(ns: str) -> None:
    class Body(CustomOp, name=f"{ns}::body"):
        @staticmethod
        def autograd(x: Tensor) -> Tensor:
            return x * 2

    with torch.inference_mode():
        (line,) = set(_each_path(Body, torch.ones(2), expected=NotImplementedError))
    assert line.startswith(f"{ns}::body (Body.autograd): the op's only kernel is at the Autograd key, which torch.inference_mode() skips")
    with torch.no_grad():  # the fix it names
        assert torch.equal(Body(torch.ones(2)), torch.full((2,), 2.0))


def test_an_in_place_write_in_an_eager_autograd_kernel_names_the_kernel_and_the_fix(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        eager_autograd = True

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            x.mul_(2)
            return x * 1

    (line,) = set(_each_path(Scale, torch.ones(2, requires_grad=True), expected=RuntimeError))
    assert line == (
        f"{ns}::scale (Scale.cpu): a leaf Variable that requires grad is being used in an in-place operation; "
        "eager_autograd differentiates through the kernel, which must not write to its inputs: write to a copy (x = x.clone() first)"
    )


def test_an_eager_autograd_op_whose_backward_name_is_taken_is_refused(ns: str) -> None:
    lib = torch.library.Library(ns, "FRAGMENT")
    try:
        lib.define("scale_eager_backward(Tensor x) -> Tensor")
        with pytest.raises(OpDefinitionError) as info:

            class Scale(CustomOp, name=f"{ns}::scale"):
                eager_autograd = True

                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x * 2

    finally:
        lib._destroy()
    assert str(info.value) == (
        f"Scale.eager_autograd: defines the op's backward op {ns}::scale_eager_backward, and that name is taken by another op; "
        f"give the op another name, or remove {ns}::scale_eager_backward"
    )
    assert not hasattr(getattr(torch.ops, ns), "scale")
