"""Test helpers for ops defined with opclass: PyTorch's own checks, run on an op's sample inputs.

An op lists representative inputs in its ``samples()`` hook (or a test passes them), and
:func:`check_op` runs, for each one: the mutation check (the kernel writes to no Tensor argument
that ``mutates_args`` does not declare), ``torch.library.opcheck``, ``torch.autograd.gradcheck``
when the op has a ``backward``, and the fast-path check (the class call, the Python guard's call
where the native guard is active, and the dispatcher are indistinguishable: outputs and result
types, mutations, version counters, ``grad_fn``, gradients and errors). A failure raises
``AssertionError`` naming the op, the sample and the check; :func:`parametrize_samples` makes
one pytest case per sample. Import it as ``import opclass.testing`` (``import opclass`` does not
load it). Examples: on each function.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map_only, tree_unflatten

from opclass._harness import call_paths, diff, first_row_that_differs, observe, vmap_disagreement
from opclass.builtin_hooks import choice, debug
from opclass.errors import first_line
from opclass.install.fake import has_fake_kernel
from opclass.install.record import OpRecord

if TYPE_CHECKING:
    import pytest

__all__ = ["Sample", "check_op", "check_sample", "parametrize_samples"]

# torch.library.opcheck's default test utils, in its order.
_OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# The utils that run the op on FakeTensors: pointless for an op with no fake kernel.
_FAKE_UTILS = ("test_faketensor", "test_aot_dispatch_dynamic")


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
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "kwargs", dict(kwargs or {}))
        object.__setattr__(self, "name", name)


# --------------------------------------------------------------------------- samples


def _record_of(op_cls: Any) -> OpRecord:
    try:
        record = op_cls.record
    except AttributeError as e:
        raise TypeError(f"{getattr(op_cls, '__qualname__', op_cls)!r} is not a concrete op class: {e}") from None
    if not isinstance(record, OpRecord):
        raise TypeError(f"{op_cls!r} is not an opclass op class (a CustomOp subclass with a kernel)")
    return record


def _to_sample(value: Any, record: OpRecord, index: int) -> Sample:
    if isinstance(value, Sample):
        return value
    if isinstance(value, tuple):
        return Sample(value)
    raise TypeError(
        f"{record.qualname}: sample {index} is a {type(value).__name__}, not a Sample or a tuple of arguments; "
        f"write Sample((x,)) or (x,) for a single argument"
    )


def _samples(op_cls: Any, samples: Iterable[Sample | tuple[Any, ...]] | None, instead: str = "pass samples=[...]") -> list[Sample]:
    record = _record_of(op_cls)
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
    found = [_to_sample(value, record, i) for i, value in enumerate(samples)]
    if not found:
        raise ValueError(f"{record.qualname}: no samples to check ({record.cls_name}.samples() or samples= gave none)")
    return found


def _label(sample: Sample, index: int | None) -> str:
    if index is None:
        return f"sample {sample.name!r}" if sample.name else "sample"
    return f"sample {index}" + (f" ({sample.name!r})" if sample.name else "")


# --------------------------------------------------------------------------- copying inputs


def _clone(t: Tensor) -> Tensor:
    """An independent copy of ``t``: same values, dtype, device, strides, requires_grad and class."""
    with torch.no_grad():
        copy: Tensor | None = None
        if type(t) in (Tensor, torch.nn.Parameter) and t.layout is torch.strided and t.device.type != "meta":
            try:
                copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t.detach())
            except RuntimeError:  # overlapping (expanded) Tensors, quantized dtypes: a plain clone
                copy = None
        if copy is None:
            copy = t.detach().clone()  # keeps a Tensor subclass's class
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=t.requires_grad)
    return copy.requires_grad_(t.requires_grad)


def _copy_inputs(sample: Sample) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Fresh inputs for one call: every Tensor cloned (the same Tensor twice stays one copy)."""
    memo: dict[int, Tensor] = {}

    def one(t: Tensor) -> Tensor:
        if id(t) not in memo:
            memo[id(t)] = _clone(t)
        return memo[id(t)]

    args, kwargs = tree_map_only(Tensor, one, (sample.args, sample.kwargs))
    return tuple(args), dict(kwargs)


# --------------------------------------------------------------------------- the checks


class _CheckFailed(Exception):
    def __init__(self, check: str, detail: str) -> None:
        super().__init__(detail)
        self.check = check
        self.detail = detail


def _run_opcheck(op_cls: Any, record: OpRecord, sample: Sample, test_utils: Sequence[str] | None) -> None:
    if test_utils is None:
        utils = _OPCHECK_UTILS if has_fake_kernel(record) else tuple(u for u in _OPCHECK_UTILS if u not in _FAKE_UTILS)
    else:
        utils = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    if not utils:
        return
    args, kwargs = _copy_inputs(sample)
    try:
        torch.library.opcheck(op_cls.op, args, kwargs, test_utils=utils)
    except Exception as e:
        raise _CheckFailed("opcheck", f"{type(e).__name__}: {e}") from e


def _run_mutation_check(op_cls: Any, record: OpRecord, sample: Sample) -> None:
    """The kernel writes only to what ``mutates_args`` declares (version counters before/after)."""
    args, kwargs = _copy_inputs(sample)
    before = debug.watched(record, args, kwargs)
    if not before:
        return
    try:
        with torch.no_grad():  # a write to a Tensor that requires grad is still seen
            op_cls.op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the other checks call it again and report the error
        return
    kernel = record.kernel_for(before[0][1].device.type)
    problem = debug.undeclared_write(kernel.where if kernel is not None else record.qualname, record, before)
    if problem is not None:
        raise _CheckFailed("mutation check", problem)


def _differentiable(t: Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _run_gradcheck(op_cls: Any, record: OpRecord, sample: Sample) -> None:
    if not record.differentiable:
        return
    args, kwargs = _copy_inputs(sample)
    # Keyword-only Tensors get gradients only when backward returns them (optional): they are
    # differentiated when the sample marks them requires_grad, never by default.
    keyword_only = {a.name for a in record.arguments.keyword_only}
    parts = (args, {k: v for k, v in kwargs.items() if k not in keyword_only}, {k: v for k, v in kwargs.items() if k in keyword_only})
    flat, spec = tree_flatten(parts)
    n_positional = len(tree_leaves(parts[:2]))  # leaves of args and positional-or-keyword kwargs
    floating = [i for i, v in enumerate(flat) if isinstance(v, Tensor) and _differentiable(v) and v.device.type != "meta"]
    # The Tensors the sample asks gradients for, else every positional floating-point one.
    positions = [i for i in floating if flat[i].requires_grad] or [i for i in floating if i < n_positional]
    if not positions:
        return  # no floating-point Tensor to differentiate
    for i, v in enumerate(flat):
        if isinstance(v, Tensor):
            v = v.detach()
            flat[i] = v.to(torch.complex128 if v.is_complex() else torch.float64) if i in floating else v
    inputs = tuple(flat[i].clone().requires_grad_() for i in positions)

    def call(*diff: Tensor) -> tuple[Tensor, ...]:
        values = list(flat)
        for i, t in zip(positions, diff):
            values[i] = t
        call_args, call_kwargs, call_keyword_only = tree_unflatten(values, spec)
        out = op_cls.op(*call_args, **call_kwargs, **call_keyword_only)
        return tuple(t for t in tree_leaves(out) if isinstance(t, Tensor))

    try:
        torch.autograd.gradcheck(call, inputs)
    except Exception as e:
        raise _CheckFailed("gradcheck", f"{type(e).__name__}: {e}") from e


def _run_reference_check(op_cls: Any, record: OpRecord, sample: Sample) -> None:
    """The ``reference`` (what a deployed program decomposes into) computes what the op does."""
    if record.hooks.get("reference") is None or record.mutated:
        return
    args, kwargs = _copy_inputs(sample)
    try:
        with torch.no_grad():
            expected = op_cls.op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the other checks call it again and report the error
        return
    args, kwargs = _copy_inputs(sample)
    first = next((t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)), None)
    kernel = record.kernel_for(first.device.type) if first is not None else None
    against = kernel.where if kernel is not None else record.qualname
    try:
        with torch.no_grad():
            got = record.hooks["reference"](*args, **kwargs)
        torch.testing.assert_close(got, expected)
    except Exception as e:
        raise _CheckFailed("reference check", f"{record.where('reference')} disagrees with {against}: {type(e).__name__}: {e}") from e


def _run_providers(op_cls: Any, record: OpRecord, sample: Sample) -> None:
    """Every available provider that runs on the sample's device: if its predicate accepts the
    sample, it must run and agree with the op's reference (its tolerances); if it declines, the
    op must still serve the sample; one flagged ``batch_invariant`` must give row i of a batch
    exactly as it gives row i alone."""
    entries = list(choice.entries_of(record))
    reference_fn = record.hooks.get("reference") or record.hooks.get("default")
    if not entries or reference_fn is None:
        return
    args, kwargs = _copy_inputs(sample)
    device = next((t.device.type for t in record.arguments.tensors(args, kwargs)), None)
    with torch.no_grad():
        expected = _outcome(record, reference_fn, sample)
    for e in entries:
        if not e.runs_on(device) or not e.available()[0]:
            continue
        full = record.arguments.complete(*_copy_inputs(sample))
        if e.options.supports is not None and not e.options.supports(*full[0], **full[1]):
            try:
                with torch.no_grad():
                    op_cls.op(*args, **kwargs)
            except Exception as error:
                raise _CheckFailed("providers", f"{e.where} declines the sample (supports() is False), and the op does not serve it otherwise: {first_line(error)}") from error
            continue
        try:
            with torch.no_grad():
                got = _outcome(record, e.checked, sample)
        except Exception as error:
            raise _CheckFailed("providers", f"{e.where} accepts the sample (supports() is true or absent) but raises {first_line(error)}: its predicate must decline what its kernel cannot run") from error
        if e.fn is not reference_fn:
            atol, rtol = e.options.tolerances()
            try:
                torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
            except AssertionError as error:
                ref = record.where("reference" if "reference" in record.hooks else "default")
                raise _CheckFailed("providers", f"{e.where} disagrees with {ref}: {error}") from error
        if e.options.batch_invariant:
            _check_rows(record, e, sample)


def _outcome(record: OpRecord, fn: Any, sample: Sample) -> Any:
    """``fn``'s outputs and the arguments it writes, on fresh copies of the sample."""
    args, kwargs = _copy_inputs(sample)
    out = fn(*args, **kwargs)
    values = record.arguments.values(args, kwargs)
    return [out, [values[a.index] for a in record.arguments.written]]


def _check_rows(record: OpRecord, e: Any, sample: Sample) -> None:
    args, kwargs = _copy_inputs(sample)
    first = next(record.arguments.tensors(args, kwargs), None)
    batch = first.shape[0] if first is not None and first.dim() else 0
    i = first_row_that_differs(e.checked, args, kwargs, batch) if batch > 1 else None
    if i is not None:
        raise _CheckFailed("providers", f"{e.where} is declared batch_invariant, but row {i} of a batch of {batch} differs from row {i} computed alone")


def _run_fast_path(op_cls: Any, sample: Sample) -> None:
    seen = {label: observe(fn, *_copy_inputs(sample)) for label, fn in call_paths(op_cls).items()}
    *fast, reference = seen
    for label in fast:
        d = diff(seen[label], seen[reference])
        if d is not None:
            plan = _record_of(op_cls).plan
            raise _CheckFailed("fast path vs dispatcher", f"{label} and {reference} (the dispatcher) differ at {d} [{plan}]")


def _check(op_cls: Any, record: OpRecord, sample: Sample, index: int | None, *, opcheck: bool, gradcheck: bool, reference: bool, fast_path: bool, test_utils: Sequence[str] | None) -> None:
    try:
        _run_mutation_check(op_cls, record, sample)
        if opcheck:
            _run_opcheck(op_cls, record, sample, test_utils)
        if gradcheck:
            _run_gradcheck(op_cls, record, sample)
        if reference:
            _run_reference_check(op_cls, record, sample)
            _run_providers(op_cls, record, sample)
        if fast_path:
            _run_fast_path(op_cls, sample)
        if record.hooks.get("vmap") is not None and not record.mutated:
            problem = vmap_disagreement(op_cls, *_copy_inputs(sample))
            if problem is not None:
                raise _CheckFailed("vmap check", f"{record.where('vmap')} {problem}; the rule must batch as the loop does (is each out_dims where its output's batch dimension is?)")
    except _CheckFailed as e:
        raise AssertionError(f"{record.qualname}, {_label(sample, index)}: {e.check} failed: {e.detail}") from e.__cause__


# --------------------------------------------------------------------------- public API


def check_sample(op_cls: Any, sample: Sample | tuple[Any, ...], *, opcheck: bool = True, gradcheck: bool = True, reference: bool = True, fast_path: bool = True, test_utils: Sequence[str] | None = None) -> None:
    """Run the checks of :func:`check_op` on one sample (the body of a parametrized test).

    Args:
        op_cls: the op class.
        sample: a :class:`Sample` or a tuple of positional arguments.
        opcheck, gradcheck, reference, fast_path, test_utils: as for :func:`check_op`.

    Raises:
        AssertionError: a check failed; the message names the op, the sample and the check.

    Example:
        >>> import torch, opclass, opclass.testing
        >>> class DocsTestingAddInto(opclass.CustomOp, name="docs_testing::add_into", mutates_args=("x",)):
        ...     @staticmethod
        ...     def default(x: torch.Tensor, y: torch.Tensor) -> None:
        ...         x.add_(y)
        >>> opclass.testing.check_sample(DocsTestingAddInto, (torch.zeros(3), torch.ones(3)))
        >>> opclass.remove(DocsTestingAddInto)
    """
    record = _record_of(op_cls)
    sample = _to_sample(sample, record, 0)
    _check(op_cls, record, sample, None, opcheck=opcheck, gradcheck=gradcheck, reference=reference, fast_path=fast_path, test_utils=test_utils)


def check_op(op_cls: Any, samples: Iterable[Sample | tuple[Any, ...]] | None = None, *, opcheck: bool = True, gradcheck: bool = True, reference: bool = True, fast_path: bool = True, test_utils: Sequence[str] | None = None) -> None:
    """Check an op on each of its samples: undeclared mutations, opcheck, gradcheck, reference, fast
    path vs dispatcher and, for an op with a ``vmap`` rule (and no written argument), ``torch.vmap``
    over 3 examples (each positional Tensor batched at dim 0, floating ones scaled x1, x1.5, x2)
    against the op called on each, each on its own copies of the sample's Tensors. The mutation
    check runs first: one call through the dispatcher, failing when the kernel moved the version
    counter of a Tensor argument that ``mutates_args`` does not name.

    Args:
        op_cls: the op class (a concrete ``CustomOp`` subclass).
        samples: :class:`Sample` objects or tuples of positional arguments; default: what the
            op's ``samples()`` hook returns (a ``ValueError`` when it has none).
        opcheck: run ``torch.library.opcheck(op_cls.op, args, kwargs, test_utils=...)``.
        gradcheck: when the op has a ``backward``, run ``torch.autograd.gradcheck`` on
            double-precision copies of the sample's floating-point Tensors, differentiating
            those with ``requires_grad=True`` (if none has it: every positional one); samples
            without floating-point Tensors are skipped.
        reference: when the op has a ``reference`` (what ``opclass.decompositions`` decomposes
            it into), compare its result with the op's (``torch.testing.assert_close``, default
            tolerances), both under ``no_grad``; not for ops that mutate their arguments. For an
            op with providers, each available one on the sample's device: one that accepts the
            sample runs it and agrees with the reference (else ``default``; its ``atol``/``rtol``),
            writes included; one that declines it leaves it to another that serves it; one
            flagged ``batch_invariant`` gives row i of the batch as it gives row i alone.
        fast_path: call the op every way it can be called (the class call, the Python guard's
            call function where the native guard is active, and ``op_cls.op``, the dispatcher)
            on independent copies and compare the exception or the output (types, metadata,
            ``grad_fn``, version counters, values, which output is an input), what ``backward``
            does, the inputs afterwards and their gradients.
        test_utils: the opcheck test utils; default all four, without ``test_faketensor`` and
            ``test_aot_dispatch_dynamic`` when the op has no fake kernel (no ``abstract``, no
            ``default``, and none that opclass generates).

    Raises:
        AssertionError: a check failed; the message names the op, the sample (index and name)
            and the check.
        ValueError: there are no samples.

    Example:
        >>> import torch, opclass, opclass.testing
        >>> class DocsTestingHalve(opclass.CustomOp, name="docs_testing::halve", schema="(Tensor x) -> Tensor"):
        ...     default = staticmethod(lambda x: x / 2)
        ...     setup_context = staticmethod(lambda ctx, inputs, output: None)
        ...     backward = staticmethod(lambda ctx, grad: grad)  # wrong: should be grad / 2
        >>> opclass.testing.check_op(DocsTestingHalve, [(torch.randn(3),)], opcheck=False)
        Traceback (most recent call last):
        ...
        AssertionError: docs_testing::halve, sample 0: gradcheck failed: GradcheckError: Jacobian mismatch ...
        >>> opclass.remove(DocsTestingHalve)
    """
    record = _record_of(op_cls)
    for index, sample in enumerate(_samples(op_cls, samples)):
        _check(op_cls, record, sample, index, opcheck=opcheck, gradcheck=gradcheck, reference=reference, fast_path=fast_path, test_utils=test_utils)


def parametrize_samples(*op_classes: Any) -> pytest.MarkDecorator:
    """A ``pytest.mark.parametrize`` over every ``(op, sample)`` pair of the given op classes, for
    ``def test_ops(op, sample): opclass.testing.check_sample(op, sample)``. The ids read
    ``"mylib::op[name]"`` (unnamed samples get their index as name); the samples come from each
    op's ``samples()`` hook when the module is collected.

    Example:
        >>> import torch, opclass, opclass.testing
        >>> class DocsTestingNeg(opclass.CustomOp, name="docs_testing::neg", schema="(Tensor x) -> Tensor"):
        ...     default = staticmethod(lambda x: -x)
        ...     samples = staticmethod(lambda: [opclass.testing.Sample((torch.ones(2),), name="ones"), (torch.zeros(()),)])
        >>> mark = opclass.testing.parametrize_samples(DocsTestingNeg)
        >>> [param.id for param in mark.args[1]]
        ['docs_testing::neg[ones]', 'docs_testing::neg[1]']
        >>> opclass.remove(DocsTestingNeg)
    """
    import pytest

    if not op_classes:
        raise TypeError("parametrize_samples() needs at least one op class")
    params = []
    for op_cls in op_classes:
        record = _record_of(op_cls)
        instead = f"leave {record.cls_name} out here and call opclass.testing.check_op({record.cls_name}, samples=[...]) in a test"
        for index, sample in enumerate(_samples(op_cls, None, instead)):
            if not sample.name:
                sample = Sample(sample.args, sample.kwargs, name=str(index))
            params.append(pytest.param(op_cls, sample, id=f"{record.qualname}[{sample.name}]"))
    return pytest.mark.parametrize(("op", "sample"), params)
