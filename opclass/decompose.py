"""Decompositions on request: the table that turns op classes into torch ops, for deployment.

An op stays one opaque node for eager calls, ``torch.compile`` and graph transforms. A runtime
without Python (an AOTInductor package, torch's C++ loader) cannot run a Python kernel, so at the
moment of deployment the exported program is decomposed:
``ep.run_decompositions(opclass.decompositions(MyOp))``. Each op decomposes into its
``reference`` hook (the op written in torch ops, for ops whose kernels are NumPy, C++ or Triton),
else into its ``default`` kernel, which must then be torch ops.

Example:
    >>> import torch, opclass
    >>> class DocsDecomposeSquare(opclass.CustomOp, name="docs_decompose::square", schema="(Tensor x) -> Tensor"):
    ...     default = staticmethod(lambda x: x * x)
    >>> list(opclass.decompositions(DocsDecomposeSquare)) == [DocsDecomposeSquare.op]
    True
    >>> opclass.remove(DocsDecomposeSquare)
"""

from __future__ import annotations

from typing import Any, Callable, MutableMapping

from opclass.errors import first_line
from opclass.install.fake import needs_real_data
from opclass.install.record import OpRecord, live_records

__all__ = ["decompositions"]


def decompositions(*op_classes: Any, base: MutableMapping[Any, Callable[..., Any]] | None = None) -> MutableMapping[Any, Callable[..., Any]]:
    """The decomposition table of ``op_classes`` (every live op class when none is given), for
    ``ExportedProgram.run_decompositions``: ``{MyOp.op: how it decomposes}``, added to ``base``
    (torch's own table, ``torch.export.default_decompositions()``, to compose with it).

    An op decomposes into its ``reference`` hook, else its ``default`` kernel. Refused, with the
    reason: an op that mutates an argument (a decomposition is functional), and an op with
    neither (its device kernels may leave torch); with no op classes given, such ops are left
    out of the table instead (they stay one node each). Composite ops are left out: they decompose on
    their own. A ``default`` that turns out to leave torch (NumPy) fails when the program is
    decomposed, with an error naming the op and the fix.

    Example:
        >>> import torch, opclass
        >>> class DocsDecomposeCube(opclass.CustomOp, name="docs_decompose::cube"):
        ...     @staticmethod
        ...     def cpu(x: torch.Tensor) -> torch.Tensor:
        ...         return torch.from_numpy(x.numpy() ** 3)
        ...     @staticmethod
        ...     def reference(x: torch.Tensor) -> torch.Tensor:
        ...         return x ** 3
        >>> table = opclass.decompositions(DocsDecomposeCube, base=torch.export.default_decompositions())
        >>> DocsDecomposeCube.op in table
        True
        >>> opclass.remove(DocsDecomposeCube)
    """
    records = [_record_of(op) for op in op_classes] if op_classes else live_records()
    table: MutableMapping[Any, Callable[..., Any]] = {} if base is None else base
    for record in records:
        if record.decomposes or record.op is None:
            continue
        try:
            table[record.op] = _decomposition(record)
        except ValueError:
            if op_classes:
                raise
            # Every live op: those that cannot decompose stay one node (name them to hear why).
    return table


def _record_of(op_cls: Any) -> OpRecord:
    record = getattr(op_cls, "record", None)
    if not isinstance(record, OpRecord) or not record.live:
        raise TypeError(f"{op_cls!r} is not a live op class (a CustomOp subclass that defines an op)")
    return record


def _decomposition(record: OpRecord) -> Callable[..., Any]:
    if record.mutated:
        raise ValueError(
            f"{record.qualname} ({record.cls_name}) mutates {', '.join(record.mutated_names)}, and a decomposition is "
            "functional: leave the op out of the table (it stays one node, which needs its module at run time), "
            "or make a functional op that returns new Tensors"
        )
    if record.hooks.get("reference") is not None:
        fn, hook = record.hooks["reference"], "reference"
    elif record.hooks.get("default") is not None:
        fn, hook = record.hooks["default"], "default"
    else:
        kernels = ", ".join(f"{record.cls_name}.{k.hook}" for k in record.kernels.values()) or "none"
        raise ValueError(
            f"{record.qualname} ({record.cls_name}) has no decomposition: its kernels ({kernels}) may leave torch "
            f"(NumPy, C++, Triton). Define {record.cls_name}.reference: the same computation in torch ops"
        )
    where, cls_name = record.where(hook), record.cls_name

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not needs_real_data(e):
                raise
            raise RuntimeError(
                f"{where} cannot be traced into torch ops ({first_line(e)}): "
                f"define {cls_name}.reference, the same computation in torch ops"
            ) from e

    decomposition.__qualname__ = decomposition.__name__ = f"{cls_name}_{hook}"
    return decomposition
