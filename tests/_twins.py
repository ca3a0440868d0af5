"""An op class beside its twin written with ``torch.library`` (``custom_op`` or ``Library``):
what a user moving code over sees of each, side by side, so that a test asserts they agree
(or, where opclass differs on purpose, exactly how).

:func:`seen` records, for one op: its schema (the op's own name left out), its tags, and for
each call the value or error in eager mode, under ``torch.compile(fullgraph=True)``
(``aot_eager``), in a ``torch.export`` graph and from ``torch.library.opcheck``.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

Call = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]


def outcome(fn: Callable[[], Any]) -> Any:
    """``fn()``'s value (Tensors as lists), or its error as (type, first line, op names left out)."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - errors are compared too
        return (type(e).__name__, _unnamed(str(e).strip().splitlines()[0]))
    return torch.utils._pytree.tree_map_only(Tensor, lambda t: (t.dtype, t.detach().tolist()), out)


def _unnamed(text: str) -> str:
    return re.sub(r"\b\w+::\w+|torch\.ops\.\w+\.\w+|\w+\.\w+\.default", "<op>", text)


def schema_of(op: Any) -> str:
    """``(Tensor x, ...) -> ...``: the schema without the op's name."""
    text = str(op._schema)
    return text[text.index("(") :]


def seen(op: Any, calls: Sequence[Call], *, opcheck: bool = True) -> dict[str, Any]:
    """What ``op`` (an OpOverload, or anything calling one) shows for each of ``calls``."""
    overload = op if isinstance(op, torch._ops.OpOverload) else getattr(op, "_opoverload", None) or op.op
    record: dict[str, Any] = {"schema": schema_of(overload), "tags": sorted(map(str, overload.tags))}
    for i, call in enumerate(calls):
        args, kwargs = call()
        record[f"eager {i}"] = outcome(lambda: op(*args, **kwargs))
        torch.compiler.reset()
        args, kwargs = call()
        record[f"compile {i}"] = outcome(lambda: torch.compile(lambda *a: op(*a, **kwargs), backend="aot_eager", fullgraph=True)(*args))
        torch.compiler.reset()
        record[f"export {i}"] = outcome(lambda: _exported(op, *call()))
        if opcheck:
            args, kwargs = call()
            record[f"opcheck {i}"] = outcome(lambda: torch.library.opcheck(overload, args, kwargs))
    return record


def _exported(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    tensors = [a for a in args if isinstance(a, Tensor)]
    slot = object()
    rest = [slot if isinstance(a, Tensor) else a for a in args]

    class Module(torch.nn.Module):
        def forward(self, *given: Tensor) -> Any:
            it = iter(given)
            return op(*[next(it) if r is slot else r for r in rest], **kwargs)

    program = torch.export.export(Module(), tuple(t.detach() for t in tensors))
    return [_unnamed(str(n.target)) for n in program.graph.nodes if n.op == "call_function"]


def failures(record: dict[str, Any]) -> dict[str, Any]:
    """The entries of a :func:`seen` record that are errors, or an opcheck that did not pass."""
    bad = {k: v for k, v in record.items() if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str)}
    bad.update({k: v for k, v in record.items() if k.startswith("opcheck") and isinstance(v, dict) and set(v.values()) != {"SUCCESS"}})
    return bad
