"""The three-way comparator: the class call under the active guard, the Python guard's call
where the native guard is active, and the dispatcher (``MyOp.op``) must be indistinguishable as
:func:`observe` and :func:`diff` see calls. :func:`opclass.testing.check_op` and opclass's own
equivalence tests use it.

Example:
    >>> import torch
    >>> from opclass._harness import diff, observe
    >>> diff(observe(torch.neg, (torch.ones(2),), {}), observe(torch.neg, (torch.ones(2),), {})) is None
    True
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any, Callable, Mapping

import torch
from torch import Tensor
from torch.utils._pytree import tree_leaves, tree_map_only

from opclass.callpath.classcall import python_guard_call
from opclass.core.native import guard_backend
from opclass.core.types import same_values

__all__ = ["call_paths", "diff", "observable", "observe"]


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _message(e: BaseException) -> tuple[str, str]:
    # "Could not run" errors list the kernels registered right now, which lazy registrations
    # (meta kernels...) change between two calls: keep the sentence, not the list.
    return type(e).__name__, _ADDRESS.sub("0x?", str(e).split("Available functions are")[0])


def _attempt(f: Callable[[], Any]) -> Any:
    try:
        return f()
    except Exception as e:  # the attribute itself raises: compare that it does
        return f"<raises {type(e).__name__}>"


def _values(t: Tensor) -> Any:
    """The data of ``t`` as a plain dense CPU Tensor (or a marker where there is none)."""
    if t.is_meta or type(t).__name__ == "FakeTensor":
        return "<no data>"
    try:
        v = t.detach()
        if torch._is_functional_tensor(v):
            torch._sync(v)  # type: ignore[attr-defined,no-untyped-call]
            v = torch._from_functional_tensor(v)
        if torch._C._functorch.is_functorch_wrapped_tensor(v):
            v = torch._C._functorch.get_unwrapped(v)
        if v.is_nested:
            return [_values(u) for u in v.unbind()]
        if v.is_quantized:
            v = v.dequantize()
        if v.layout is not torch.strided:
            v = v.to_dense()
        return v.resolve_conj().resolve_neg().as_subclass(torch.Tensor).clone()
    except Exception as e:
        return f"<values raise {type(e).__name__}>"


def _graph(fn: Any, depth: int = 2) -> Any:
    """The autograd node's type and, ``depth`` levels down, those of its next functions."""
    if fn is None:
        return None
    if depth == 0:
        return type(fn).__name__
    return [type(fn).__name__, [(_graph(f, depth - 1), i) for f, i in fn.next_functions]]


def observable(value: Any) -> Any:
    """Everything observable about a Tensor, as plain data (anything else is returned as is): the
    ``grad_fn`` graph two levels down, an attribute that raises as raising."""
    if not isinstance(value, Tensor):
        return value
    return {
        "type": type(value).__name__,
        "dtype": _attempt(lambda: value.dtype),
        "shape": _attempt(lambda: tuple(value.shape)),
        "stride": _attempt(value.stride),
        "storage_offset": _attempt(value.storage_offset),
        "device": _attempt(lambda: value.device),
        "layout": _attempt(lambda: value.layout),
        "requires_grad": _attempt(lambda: value.requires_grad),
        "is_leaf": _attempt(lambda: value.is_leaf),
        "grad_fn": _attempt(lambda: _graph(value.grad_fn)),
        "conj": _attempt(value.is_conj),
        "neg": _attempt(value.is_neg),
        "inference": _attempt(value.is_inference),
        "version": _attempt(lambda: value._version),
        "values": _values(value),
    }


def _output_observed(out: Any, inputs: list[Tensor]) -> Any:
    """The output with its container types, each Tensor described with the input it *is*."""
    if isinstance(out, (tuple, list)):
        return {"container": type(out).__name__, "items": [_output_observed(o, inputs) for o in out]}
    if isinstance(out, dict):
        return {k: _output_observed(v, inputs) for k, v in out.items()}
    if isinstance(out, Tensor):
        return {"is_input": [i for i, t in enumerate(inputs) if out is t], **observable(out)}
    if isinstance(out, float) and math.isnan(out):
        return "nan"
    return out  # diff compares its type too


def _backward(out: Any, enabled: bool = True) -> Any:
    """Backward through every output that requires grad (ones as gradients): what happened."""
    if not enabled:
        return None
    outs = [t for t in tree_leaves(out) if isinstance(t, Tensor) and t.requires_grad]
    if not outs:
        return "no output requires grad"
    try:
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
    except Exception as e:
        return _message(e)
    return "ok"


def _after(out: Any, inputs: list[Tensor]) -> dict[str, Any]:
    """The output, every input afterwards, and the inputs' gradients, described."""
    return {
        "output": _output_observed(out, inputs),
        "inputs_after": [observable(t) for t in inputs],
        "grads": [observable(t.grad) if t.is_leaf else "<non-leaf>" for t in inputs],
    }


def observe(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], *, backward: bool = True) -> dict[str, Any]:
    """Call ``fn(*args, **kwargs)``: everything observable about the call, as data (each Tensor as
    :func:`observable` sees it, an output with which input it *is*), to compare with :func:`diff`."""
    # The distinct input Tensors, in order.
    inputs = list({id(leaf): leaf for leaf in tree_leaves((args, dict(kwargs))) if isinstance(leaf, Tensor)}.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out, exception = fn(*args, **kwargs), None
        except Exception as e:
            out, exception = None, _message(e)
        return {"exception": exception, "backward": _backward(out, backward), **_after(out, inputs)}


def diff(a: Any, b: Any, path: str = "") -> str | None:
    """The first difference between two observations (or any plain data), as text; ``None``: equal.
    Tensors must be equal exactly (NaN where NaN); everything else of the same type and equal."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
            return f"{path}: {a!r} vs {b!r}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        return None if same_values(a, b) else f"{path}: values differ\n{a}\nvs\n{b}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a)} vs {sorted(b)}"
        return next((d for k in a if (d := diff(a[k], b[k], f"{path}.{k}")) is not None), None)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {a!r} vs {b!r}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := diff(x, y, f"{path}[{i}]")) is not None), None)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    return None if (type(a) is type(b) and a == b) else f"{path}: {a!r} vs {b!r}"


def call_paths(op_cls: Any) -> dict[str, Callable[..., Any]]:
    """The ways to call an op that must be indistinguishable, by label: the class call under the
    active guard, the pure-Python guard's call (where the native guard is active and the op has a
    fast path), and the dispatcher (``MyOp.op``, as ``torch.ops`` calls it) last."""
    record = op_cls.record
    name = getattr(op_cls, "__name__", "MyOp")
    paths: dict[str, Callable[..., Any]] = {f"{name}(...)": op_cls}
    python = python_guard_call(record, op_cls) if guard_backend() == "native" else None
    if python is not None:
        def python_guard(*args: Any, **kwargs: Any) -> Any:
            try:
                return python(*args, **kwargs)
            except TypeError as e:
                # Binding failed (no frame of the call ran): the class call hands over to the
                # dispatcher there, for torch's own error.
                if e.__traceback__ is not None and e.__traceback__.tb_next is None:
                    return record.op(*args, **kwargs)
                raise

        paths[f"{name}(...) [Python guard]"] = python_guard
    paths[f"{name}.op(...)"] = op_cls.op
    return paths


def first_row_that_differs(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], batch: int) -> int | None:
    """The first i where row i of ``fn`` on a batch of ``batch`` rows differs, bit for bit, from
    ``fn`` on row i alone (every Tensor argument ``batch`` long cut to its row i), or ``None``."""

    def alone(i: int) -> list[Any]:
        pick = lambda t: t[i : i + 1] if t.dim() and t.shape[0] == batch else t  # noqa: E731
        return tree_leaves(fn(*tree_map_only(Tensor, pick, args), **tree_map_only(Tensor, pick, dict(kwargs))))

    with torch.no_grad():
        whole = tree_leaves(fn(*args, **kwargs))
        for i in range(batch):
            if any(isinstance(w, Tensor) and w.dim() and w.shape[0] == batch and not torch.equal(w[i : i + 1], a) for w, a in zip(whole, alone(i))):
                return i
    return None


def vmap_disagreement(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any], batch: int = 3) -> str | None:
    """How ``torch.vmap(fn)`` over ``batch`` examples of the call differs from ``fn`` called on
    each example, or ``None``. Every positional Tensor argument is batched at dim 0; floating
    ones are scaled per example (x1, x1.5, x2...), so that the examples differ."""
    batched = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not batched:
        return None
    examples = [tuple(a * (1 + k / 2) if i in batched and a.is_floating_point() else a for i, a in enumerate(args)) for k in range(batch)]
    stacked = tuple(torch.stack([ex[i] for ex in examples]) if i in batched else a for i, a in enumerate(args))
    in_dims = tuple(0 if i in batched else None for i in range(len(args)))
    with torch.no_grad():
        expected = [tree_leaves(fn(*ex, **kwargs)) for ex in examples]
        try:
            got = tree_leaves(torch.vmap(lambda *a: fn(*a, **kwargs), in_dims=in_dims)(*stacked))
        except Exception as e:  # noqa: BLE001 - the rule's error is the finding
            kind, text = _message(e)
            return f"raised {kind}: {(text.strip().splitlines() or [''])[0]} under torch.vmap over {batch} examples"
    for n, (g, outs) in enumerate(zip(got, zip(*expected))):
        if not isinstance(g, Tensor):
            continue
        try:
            torch.testing.assert_close(g, torch.stack(outs))
        except AssertionError as e:
            where = f"output {n}" if len(got) > 1 else "the output"
            return f"disagrees with the op called on each of {batch} examples ({where}, batch dim 0): {str(e).strip().splitlines()[0]}"
    return None
