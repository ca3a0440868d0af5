"""A new overridable hook, added from outside opclass: ``inverse``.

Any op class may now define ``inverse(y, *args)``, checked when the class is created and
installed when it is registered; ``inverse(MyOp)`` returns the function that undoes ``MyOp``.
This is exactly how opclass's own hooks (``cpu``, ``abstract``, ``backward``...) are built.

Run: ``python examples/inverse_hook.py``
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch import Tensor

import opclass
from opclass import CustomOp, HookContext, OpRecord

_INVERSES: dict[str, Callable[..., Any]] = {}


def _check_inverse(fn: Callable[..., Any], ctx: HookContext) -> None:
    """Runs at class creation: the inverse takes the output in place of the first argument."""
    if len(ctx.schema.returns) != 1:
        ctx.fail("an inverse needs an op with exactly one output", "remove inverse, or return one Tensor")
    op_params = [p for p in ctx.signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    params = list(inspect.signature(fn).parameters)
    if len(params) != len(op_params):
        expected = ", ".join(["y"] + [p.name for p in op_params[1:]])
        ctx.fail(f"takes {len(params)} parameters, the op takes {len(op_params)}", f"write inverse({expected})")


def _install_inverse(record: OpRecord, fn: Callable[..., Any]) -> None:
    """Runs when an op class that defines (or inherits) ``inverse`` is registered."""
    _INVERSES[record.qualname] = fn


INVERSE = opclass.register_hook(
    opclass.Hook("inverse", _install_inverse, check=_check_inverse, doc="inverse(y, *args): undoes the op")
)


def inverse(op: type[CustomOp]) -> Callable[..., Any]:
    """The function that undoes ``op``: ``inverse(Op)(Op(x, *args), *args) == x``."""
    qualname = op.qualname
    if qualname not in _INVERSES:
        raise LookupError(f"{qualname} defines no inverse")
    return _INVERSES[qualname]


class Scale(CustomOp, name="ex_inverse::scale"):
    @staticmethod
    def default(x: Tensor, factor: float) -> Tensor:
        return x * factor

    @staticmethod
    def abstract(x: Tensor, factor: float) -> Tensor:
        return torch.empty_like(x)

    @staticmethod
    def inverse(y: Tensor, factor: float) -> Tensor:
        return y / factor


class Shift(CustomOp, name="ex_inverse::shift"):
    @staticmethod
    def default(x: Tensor, by: float) -> Tensor:
        return x + by

    @staticmethod
    def inverse(y: Tensor, by: float) -> Tensor:
        return y - by


def main() -> None:
    x = torch.randn(4)
    for op, arg in ((Scale, 3.0), (Shift, -1.5)):
        y = op(x, arg)
        back = inverse(op)(y, arg)
        torch.testing.assert_close(back, x)
        print(f"{op.qualname}: inverse(op)(op(x, {arg}), {arg}) == x")


if __name__ == "__main__":
    main()
