"""``default`` doubles as the fake kernel of an op without ``abstract``.

A ``default`` kernel made of torch ops computes its outputs' metadata just as well on FakeTensors,
which is what a ``CompositeExplicitAutograd`` kernel registered with ``Library.impl`` does under
FakeTensor (it serves the Meta key). Registered as the op's fake kernel, it works the same under
FakeTensor, ``torch.compile``, ``torch.export`` and ``opcheck``. A kernel that cannot run on fake
tensors (it calls NumPy, reads values, makes data-dependent shapes) gets the error an op without
a fake kernel gets: define ``abstract``, with what went wrong. ``abstract``, when defined, wins.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["default_as_fake", "no_fake_message"]


def no_fake_message(qualname: str, cls_name: str) -> str:
    """The error of an op whose fake kernel is missing (or whose ``default`` cannot be one)."""
    return (
        f"{qualname} has no fake kernel, which torch.compile, torch.export and FakeTensor need: "
        f"define {cls_name}.abstract (same arguments; build outputs with torch.empty_like etc.)"
    )


def default_as_fake(qualname: str, cls_name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """The fake kernel that runs ``kernel`` (the checked ``default``) on the fake inputs."""
    message = no_fake_message(qualname, cls_name)

    def default_fake(*args: Any, **kwargs: Any) -> Any:
        try:
            return kernel(*args, **kwargs)
        except Exception as e:
            if not _needs_real_data(e):
                raise  # the kernel's own error (a bad argument...), as in eager mode
            raise RuntimeError(f"{message}. {cls_name}.default cannot run on fake tensors: {type(e).__name__}: {_first_line(e)}") from e

    return default_fake


def _needs_real_data(e: BaseException) -> bool:
    """The error says the kernel needs values or storage that fake tensors do not have."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    if isinstance(e, (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException, GuardOnDataDependentSymNode)):
        return True
    text = str(e)
    # .numpy() (NumPy, np.asarray), data pointers and storage of fake/meta tensors; a torch op or
    # C++ kernel with no Meta kernel.
    return isinstance(e, (RuntimeError, NotImplementedError, TypeError)) and any(
        s in text for s in (".numpy()", "data pointer", "storage", "'Meta' backend", "meta tensor", "Meta tensor", "FakeTensor")
    )


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""
