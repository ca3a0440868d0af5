"""Samples of an op, for its checks and tuning: :class:`Sample` (``opclass.testing.Sample``), an
op's samples (its ``samples()`` hook, or given), and fresh copies of a sample's inputs per call.

Example:
    >>> import torch
    >>> from opclass._samples import Sample, copy_inputs
    >>> sample = Sample((torch.ones(2),))
    >>> copy_inputs(sample)[0][0] is sample.args[0]
    False
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch import Tensor
from torch.utils._pytree import tree_map_only

from opclass.core.types import inner
from opclass.define.arguments import Argument
from opclass.install.record import OpRecord

__all__ = ["Sample", "record_of", "to_sample", "samples_of", "label", "as_dispatched", "copy_inputs"]


@dataclasses.dataclass(frozen=True, init=False)
class Sample:
    """One representative input of an op: positional ``args``, keyword ``kwargs`` and a ``name``.

    The ``name`` labels the sample in failure messages and test ids (``"mylib::op[name]"``);
    unnamed samples are labelled by their index. A ``samples()`` hook may also yield a plain tuple
    of positional arguments instead of a ``Sample``.

    Example:
        >>> import torch
        >>> from opclass.testing import Sample
        >>> s = Sample((torch.ones(2),), {"alpha": 2.0}, name="ones")
        >>> s.args[0].shape, s.kwargs, s.name
        (torch.Size([2]), {'alpha': 2.0}, 'ones')
        >>> Sample([1, 2]).args  # any sequence becomes a tuple
        (1, 2)
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str

    def __init__(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, name: str = "") -> None:
        if isinstance(args, (str, bytes, Tensor)) or not isinstance(args, Sequence):
            raise TypeError(f"Sample(args=...) takes a tuple of positional arguments, got {type(args).__name__}: write Sample((x,)) for one argument")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"Sample(kwargs=...) takes a dict of keyword arguments, got {type(kwargs).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"Sample(name=...) takes a str, got {type(name).__name__}")
        for field, value in (("args", tuple(args)), ("kwargs", dict(kwargs or {})), ("name", name)):
            object.__setattr__(self, field, value)


def record_of(op_cls: Any) -> OpRecord:
    try:
        record = op_cls.record
    except AttributeError as e:
        raise TypeError(f"{getattr(op_cls, '__qualname__', op_cls)!r} is not a concrete op class: {e}") from None
    if not isinstance(record, OpRecord):
        raise TypeError(f"{op_cls!r} is not an opclass op class (a CustomOp subclass with a kernel)")
    return record


def to_sample(value: Any, record: OpRecord, index: int) -> Sample:
    if isinstance(value, Sample):
        return value
    if isinstance(value, tuple):
        return Sample(value)
    raise TypeError(
        f"{record.qualname}: sample {index} is a {type(value).__name__}, not a Sample or a tuple of arguments; "
        f"write Sample((x,)) or (x,) for a single argument"
    )


def samples_of(op_cls: Any, samples: Iterable[Sample | tuple[Any, ...]] | None, instead: str = "pass samples=[...]") -> list[Sample]:
    record = record_of(op_cls)
    if samples is None:
        hook = record.hooks.get("samples")
        if hook is None:
            raise ValueError(
                f"{record.qualname} has no samples: define a samples() static method on {record.cls_name} "
                f"(returning or yielding opclass.testing.Sample objects), or {instead}"
            )
        samples = hook()
        if samples is None:
            raise ValueError(f"{record.qualname}: {record.cls_name}.samples() returned None; return or yield the samples")
    found = [to_sample(value, record, i) for i, value in enumerate(samples)]
    if not found:
        raise ValueError(f"{record.qualname}: no samples to check ({record.cls_name}.samples() or samples= gave none)")
    return found


def label(sample: Sample, index: int | None) -> str:
    if index is None:
        return f"sample {sample.name!r}" if sample.name else "sample"
    return f"sample {index}" + (f" ({sample.name!r})" if sample.name else "")


def as_dispatched(record: OpRecord, sample: Sample, index: int | None) -> Sample:
    """``sample`` as the dispatcher hands it to a kernel (the checks call kernels, predicates and the
    reference directly): bound by name, positional arguments by position and defaults filled in, a
    tuple for a list as a list, an int for a float as a float. ``TypeError`` where it does not bind."""
    try:
        bound = record.signature.bind(*sample.args, **sample.kwargs)
    except TypeError as e:
        raise TypeError(f"{record.qualname}, {label(sample, index)}: {e}; the op takes {record.arguments.parameters()}") from None

    def scalar(a: Argument, v: Any) -> Any:
        return float(v) if type(v) in (int, bool) and inner(a.jit)[0] == "float" else v

    values = record.arguments.values(*record.arguments.complete(bound.args, bound.kwargs))
    values = [[scalar(a, e) for e in v] if a.is_list and isinstance(v, (list, tuple)) else scalar(a, v) for a, v in zip(record.arguments, values)]
    n = len(record.arguments.positional)
    return Sample(values[:n], dict(zip(record.arguments.names[n:], values[n:])), sample.name)


def _clone(t: Tensor) -> Tensor:
    """An independent copy of ``t``: same values, dtype, device, strides, requires_grad and class."""
    plain = type(t) in (Tensor, torch.nn.Parameter) and t.layout is torch.strided and t.device.type != "meta"
    with torch.no_grad():
        try:
            # empty_strided keeps every stride; a clone keeps a Tensor subclass's class.
            copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t.detach()) if plain else t.detach().clone()
        except RuntimeError:  # overlapping (expanded) Tensors: a copy of the storage they span, viewed alike
            span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
            copy = t.detach().as_strided((span,), (1,)).clone().as_strided(t.size(), t.stride()) if plain and not t.is_quantized else t.detach().clone()
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=t.requires_grad)
    return copy.requires_grad_(t.requires_grad)


def copy_inputs(sample: Sample) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Fresh inputs for one call: every Tensor cloned (the same Tensor twice stays one copy)."""
    memo: dict[int, Tensor] = {}

    def one(t: Tensor) -> Tensor:
        return memo[id(t)] if id(t) in memo else memo.setdefault(id(t), _clone(t))

    args, kwargs = tree_map_only(Tensor, one, (sample.args, sample.kwargs))
    return tuple(args), dict(kwargs)
