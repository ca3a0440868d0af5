"""Decompositions on request: the table that turns op classes into torch ops, for deployment.

An op stays one opaque node for eager calls, ``torch.compile`` and graph transforms. A runtime
without Python (an AOTInductor package, torch's C++ loader) cannot run a Python kernel, so at the
moment of deployment the exported program is decomposed, each op into its torch-op
``reference`` (or its ``default``): ``ep.run_decompositions(opclass.decompositions(MyOp))``.

Example:
    >>> import torch, opclass
    >>> class DocsDecomposeSquare(opclass.CustomOp, name="docs_decompose::square", schema="(Tensor x) -> Tensor"):
    ...     default = staticmethod(lambda x: x * x)
    >>> list(opclass.decompositions(DocsDecomposeSquare)) == [DocsDecomposeSquare.op]
    True
    >>> opclass.remove(DocsDecomposeSquare)
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, MutableMapping

import torch

from opclass.errors import first_line
from opclass.install.conventions import copy_out
from opclass.install.fake import needs_real_data
from opclass.install.record import OpRecord, live_records, lookup

__all__ = ["decompositions"]


def decompositions(*ops: Any, base: MutableMapping[Any, Callable[..., Any]] | None = None) -> MutableMapping[Any, Callable[..., Any]]:
    """The decomposition table of ``ops`` (every live op class when none is given), for
    ``ExportedProgram.run_decompositions``: ``{MyOp.op: how it decomposes}``, added to ``base``
    (torch's own table, ``torch.export.default_decompositions()``, to compose with it). An op
    is given as ``opclass.remove`` takes it: its class or its qualified name (``"ns::op"``), or
    as its ``OpOverload`` (``MyOp.op``, ``torch.ops.ns.op``).

    An op decomposes into its ``reference`` hook, else its ``default`` kernel (one that leaves torch,
    e.g. NumPy, fails when the program is decomposed, naming the op and the fix). Refused, with the
    reason (with no ops given: left out, one node each, and named in a warning): an op that mutates
    an argument (a decomposition is functional), and an op with neither (its kernels may leave torch). Ops whose body
    is their only kernel (``composite``, ``autograd``) decompose into what the body calls (a
    trace runs it before any table is read); one given with a ``reference`` is refused.

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
        >>> DocsDecomposeCube.op in table, opclass.decompositions("docs_decompose::cube").keys() == {DocsDecomposeCube.op}
        (True, True)
        >>> opclass.remove(DocsDecomposeCube)
    """
    records = [_record_of(op) for op in ops] if ops else live_records()
    table: MutableMapping[Any, Callable[..., Any]] = {} if base is None else base
    opaque: list[str] = []
    for record in records:
        # A body that every trace runs (and no ``reference`` it could disagree with) decomposes itself.
        if record.op is None or (record.decomposes and record.hooks.get("reference") is None):
            continue
        try:
            table[record.op] = _decomposition(record)
        except ValueError as e:
            if ops:
                raise
            opaque.append(str(e))
    if opaque:
        warnings.warn(
            f"opclass.decompositions(): {len(opaque)} op(s) left out of the table stay one node each in a decomposed "
            "program, which a runtime without Python cannot run:\n  " + "\n  ".join(opaque),
            stacklevel=2,
        )
    return table


def _record_of(op: Any) -> OpRecord:
    if isinstance(op, str):
        record = lookup(op)
    elif isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        record = next((r for r in live_records() if r.op is not None and op in (r.op, r.op.overloadpacket)), None)
    else:
        record = getattr(op, "record", None) if isinstance(op, type) else None
    if not isinstance(record, OpRecord) or not record.live:
        raise TypeError(
            f"opclass.decompositions() takes live op classes, their qualified names ('ns::op') or their OpOverloads "
            f"(MyOp.op), as opclass.remove takes them; {op!r} is none of those"
        )
    return record


def _decomposition(record: OpRecord) -> Callable[..., Any]:
    if record.convention.kind != "functional" and (base := lookup(record.convention.base)) is not None:
        return _written_through(record, _decomposition(base))
    if record.decomposes:
        # The body runs before any decomposition table is read (it is a kernel at an Autograd
        # or CompositeImplicitAutograd key): the program holds what the body calls.
        body = next((r for r in record.lib.registrations if r.hook is not None and r.hook in record.hooks), None) if record.lib is not None else None
        hook = f"{record.cls_name}.{body.hook}" if body is not None and body.hook is not None else "its body"
        raise ValueError(
            f"{record.qualname} ({record.cls_name}) runs {hook} (at {body.key if body else 'an Autograd key'}) before any decomposition table is read: "
            f"a decomposed program holds what {hook} calls, not {record.cls_name}.reference. To deploy the reference, write the op "
            f"as default (or device kernels) with setup_context and backward, or drop reference if {hook} is the same torch ops"
        )
    if record.mutated:
        raise ValueError(
            f"{record.qualname} ({record.cls_name}) mutates {', '.join(record.mutated_names)}, and a decomposition is functional: "
            "leave the op out of the table (it stays one node, which needs its module at run time), or make a functional op that returns new Tensors"
        )
    hook = next((h for h in ("reference", "default") if record.hooks.get(h) is not None), "")
    if not hook:
        kernels = ", ".join(f"{record.cls_name}.{k.hook}" for k in record.kernels.values()) or "none"
        raise ValueError(
            f"{record.qualname} ({record.cls_name}) has no decomposition: its kernels ({kernels}) may leave torch "
            f"(NumPy, C++, Triton). Define {record.cls_name}.reference: the same computation in torch ops"
        )
    fn, where, cls_name = record.hooks[hook], record.where(hook), record.cls_name

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not needs_real_data(e):
                raise
            raise RuntimeError(
                f"{where} cannot be traced into torch ops ({first_line(e)}): define {cls_name}.reference, the same computation in torch ops"
            ) from e

    decomposition.__qualname__ = decomposition.__name__ = f"{cls_name}_{hook}"
    return decomposition


def _written_through(record: OpRecord, functional: Callable[..., Any]) -> Callable[..., Any]:
    """An ``.out`` or in-place overload's decomposition: the functional op's, its results then
    written into the out buffers (resized as ``out=`` does) or into the arguments it writes."""
    outs, aliased = set(record.convention.outs) if record.convention.kind == "out" else set(), record.outputs.aliased

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        results = functional(*args, **{k: v for k, v in kwargs.items() if k not in outs})
        written = aliased(args, kwargs, tuple)
        for w, r in zip(written, results if isinstance(results, tuple) else (results,)):
            copy_out(r, w, resize=bool(outs))
        return written[0] if len(written) == 1 else written

    decomposition.__qualname__ = decomposition.__name__ = f"{record.cls_name.replace('.', '_')}_decomposition"
    return decomposition
