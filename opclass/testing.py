"""Test helpers for ops defined with opclass: PyTorch's own checks, run on an op's sample inputs.

An op lists representative inputs in its ``samples()`` hook (or a test passes them), and
:func:`check_op` runs every check on each one (:func:`check_sample` on one); a failure raises
``AssertionError`` naming the op, the sample and the check. :func:`parametrize_samples` makes one
pytest case per sample. Import it as ``import opclass.testing`` (``import opclass`` does not load it).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from opclass._harness import call_paths, diff, first_row_that_differs, observe, vmap_disagreement
from opclass._samples import Sample, as_dispatched, copy_inputs, label, record_of, samples_of, to_sample
from opclass.builtin_hooks import debug
from opclass.errors import first_line
from opclass.install import orders
from opclass.install.fake import has_fake_kernel
from opclass.install.record import OpRecord
from opclass.install.table import Entry
from opclass.providers import refresh_all

if TYPE_CHECKING:
    import pytest

__all__ = ["Sample", "check_op", "check_sample", "parametrize_samples", "platform"]

# torch.library.opcheck's default test utils, in its order.
_OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# The utils that run the op on FakeTensors: pointless for an op with no fake kernel.
_FAKE_UTILS = ("test_faketensor", "test_aot_dispatch_dynamic")


class _CheckFailed(Exception):
    def __init__(self, check: str, detail: str) -> None:
        super().__init__(detail)
        self.check, self.detail = check, detail


def _run_opcheck(op_cls: Any, record: OpRecord, sample: Sample, test_utils: Sequence[str] | None) -> None:
    if test_utils is None:
        utils = _OPCHECK_UTILS if has_fake_kernel(record) else tuple(u for u in _OPCHECK_UTILS if u not in _FAKE_UTILS)
    else:
        utils = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    if not utils:
        return
    try:
        torch.library.opcheck(op_cls.op, *copy_inputs(sample), test_utils=utils)
    except Exception as e:
        raise _CheckFailed("opcheck", f"{type(e).__name__}: {e}") from e


def _run_mutation_check(op_cls: Any, record: OpRecord, sample: Sample, where: str | None = None) -> None:
    """The kernel (``where``: the provider chosen) writes only what ``mutates_args`` declares."""
    args, kwargs = copy_inputs(sample)
    before = debug.watched(record, args, kwargs)
    if not before:
        return
    try:
        with torch.no_grad():  # a write to a Tensor that requires grad is still seen
            op_cls.op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the other checks call it again and report the error
        return
    kernel = record.kernel_for(record.arguments.device_of(args, kwargs) or "")
    problem = debug.undeclared_write(where or (kernel.where if kernel is not None else record.qualname), record, before)
    if problem is not None:
        raise _CheckFailed("mutation check", problem)


def _run_gradcheck(op_cls: Any, record: OpRecord, sample: Sample, options: Mapping[str, Any]) -> None:
    if not record.differentiable:
        return
    args, kwargs = copy_inputs(sample)
    # Keyword-only Tensors get gradients only when backward returns them (optional): they are
    # differentiated when the sample marks them requires_grad, never by default.
    keyword_only = {a.name for a in record.arguments.keyword_only}
    parts = (args, {k: v for k, v in kwargs.items() if k not in keyword_only}, {k: v for k, v in kwargs.items() if k in keyword_only})
    flat, spec = tree_flatten(parts)
    n_positional = len(tree_leaves(parts[:2]))  # leaves of args and positional-or-keyword kwargs
    floating = [i for i, v in enumerate(flat) if isinstance(v, Tensor) and (v.is_floating_point() or v.is_complex()) and v.device.type != "meta"]
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
        given = dict(zip(positions, diff))
        call_args, call_kwargs, call_keyword_only = tree_unflatten([given.get(i, v) for i, v in enumerate(flat)], spec)
        return tuple(t for t in tree_leaves(op_cls.op(*call_args, **call_kwargs, **call_keyword_only)) if isinstance(t, Tensor))

    try:
        torch.autograd.gradcheck(call, inputs, **options)
    except Exception as e:
        raise _CheckFailed("gradcheck", f"{type(e).__name__}: {e}") from e


def _run_reference_check(op_cls: Any, record: OpRecord, sample: Sample) -> None:
    """The ``reference`` (what a deployed program decomposes into) computes what the op does."""
    if record.hooks.get("reference") is None or record.mutated or record.table.has_providers:
        return  # _run_providers holds each kernel of an op with providers to it, with its own atol/rtol
    args, kwargs = copy_inputs(sample)
    try:
        with torch.no_grad():
            expected = op_cls.op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the other checks call it again and report the error
        return
    args, kwargs = copy_inputs(sample)
    device = record.arguments.device_of(args, kwargs)
    kernel = record.kernel_for(device) if device is not None else None
    against = kernel.where if kernel is not None else record.qualname
    # The op's own kernel states its tolerances (@opclass.provider(atol=...) on default, cpu...).
    own = next((e for e in record.table.entries if e.own and e.runs_on(device)), None)
    atol, rtol = own.options.tolerances(expected) if own is not None else (None, None)
    try:
        with torch.no_grad():
            got = record.hooks["reference"](*args, **kwargs)
        torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    except Exception as e:
        raise _CheckFailed("reference check", f"{record.where('reference')} disagrees with {against}: {type(e).__name__}: {e}") from e


def _reference(record: OpRecord, device: str | None) -> tuple[Any, str] | None:
    """What a provider is held to: ``reference``, else ``default``, else the op's own kernel for
    ``device``; and how failures name it."""
    for hook in ("reference", "default"):
        if record.hooks.get(hook) is not None:
            return record.hooks[hook], record.where(hook)
    own = record.table.own().get(device)
    return (own.raw, own.where) if own is not None else None


def _run_providers(op_cls: Any, record: OpRecord, sample: Sample, opcheck: bool, test_utils: Sequence[str] | None, reached: dict[str, str | None]) -> None:
    """Every provider that runs on the sample's device, checked as the chosen one (a block that
    names it alone), as :func:`check_op` says under ``reference``. ``reached``: provider -> why it
    went unchecked (``None``: checked), over the samples."""
    table = record.table
    args, kwargs = copy_inputs(sample)
    device = record.arguments.device_of(args, kwargs)
    slot = device if device in table.kernels else None
    ref = _reference(record, device)
    expected = None
    if ref is not None and table.has_providers:
        try:
            with torch.no_grad():  # once per sample, for every provider
                expected = _outcome(record, ref[0], sample)[0]
        except Exception as error:  # the sample's fault or the reference's, not a provider's
            raise _CheckFailed("providers", f"{ref[1]}, which the providers are held to, raises {first_line(error)} on the sample: fix it or the sample") from error

    def unchecked(name: str, why: str) -> None:
        if reached.get(name, "") is not None:
            reached[name] = why

    for e in table.entries if table.has_providers else ():
        try:
            if not e.runs_on(device):
                unchecked(e.name, f"runs on {', '.join(e.options.devices or ())}, and no sample is on those devices")
                continue
            alone = orders.State({record.qualname: (e.name,)})
            if not e.available()[0] or table.choice(slot, alone).pick(args, kwargs) is not e:
                unchecked(e.name, f"not available: {e.available()[1]}" if not e.available()[0] else "declined every sample (supports() returned False)")
                if e.available()[0]:
                    try:
                        with torch.no_grad():
                            op_cls.op(*args, **kwargs)
                    except Exception as error:
                        raise _CheckFailed("providers", f"{e.where} declines the sample (supports() is False), and the op does not serve it otherwise: {first_line(error)}") from error
                continue
            with orders.block(alone):
                try:
                    with torch.no_grad():
                        got, ran_args, ran_kwargs = _outcome(record, e.checked, sample)
                except Exception as error:
                    raise _CheckFailed("providers", f"{e.where} accepts the sample (supports() is true or absent) but raises {first_line(error)}: its predicate must decline what its kernel cannot run") from error
                _run_mutation_check(op_cls, record, sample, e.where)
                problem = debug.fake_disagrees(record, e.where, ran_args, ran_kwargs, got[0])
                if problem is not None:
                    raise _CheckFailed("providers", problem)
                if opcheck and not e.own:
                    try:
                        _run_opcheck(op_cls, record, sample, test_utils)
                    except _CheckFailed as failed:
                        raise _CheckFailed(f"opcheck of provider {e.name!r} ({e.where}, as the chosen one)", failed.detail) from failed.__cause__
            if ref is not None and e.raw is not ref[0]:
                try:
                    atol, rtol = e.options.tolerances(expected)
                    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
                except AssertionError as error:
                    raise _CheckFailed("providers", f"{e.where} disagrees with {ref[1]}: {error}") from error
            if e.options.batch_invariant:
                # The rows are those of the Tensor with the most dimensions (x, not a weight before it).
                first = max(record.arguments.tensors(sample.args, sample.kwargs), key=lambda t: t.dim(), default=None)
                batch = first.shape[0] if first is not None and first.dim() else 0
                if batch < 2:
                    unchecked(e.name, "declared batch_invariant, and no sample has more than one row")
                    continue
                i = first_row_that_differs(e.checked, *copy_inputs(sample), batch)
                if i is not None:
                    raise _CheckFailed("providers", f"{e.where} is declared batch_invariant, but row {i} of a batch of {batch} differs from row {i} computed alone")
            reached[e.name] = None
        except _CheckFailed:
            raise
        except Exception as error:  # a predicate, or the kernel on a batch's rows: the provider's
            raise _CheckFailed("providers", f"provider {e.name!r} of {e.where}: {first_line(error)}") from error


def _outcome(record: OpRecord, fn: Any, sample: Sample) -> tuple[list[Any], tuple[Any, ...], dict[str, Any]]:
    """``[outputs, the arguments it writes]`` of ``fn`` on fresh copies of the sample, and those copies."""
    args, kwargs = copy_inputs(sample)
    out = fn(*args, **kwargs)
    values = record.arguments.values(args, kwargs)
    return [out, [values[a.index] for a in record.arguments.written]], args, kwargs


def _run_fast_path(op_cls: Any, sample: Sample) -> None:
    seen = {label: observe(fn, *copy_inputs(sample)) for label, fn in call_paths(op_cls).items()}
    *fast, reference = seen
    for label in fast:
        d = diff(seen[label], seen[reference])
        if d is not None:
            raise _CheckFailed("fast path vs dispatcher", f"{label} and {reference} (the dispatcher) differ at {d} [{record_of(op_cls).plan}]")


def _chosen(record: OpRecord, sample: Sample) -> Entry | None:
    """The kernel of an op with providers that the order in force runs ``sample`` with (how failures name it)."""
    args, kwargs = copy_inputs(sample)
    device = record.arguments.device_of(args, kwargs)
    try:
        return record.table.now(device if device in record.table.kernels else None).pick(args, kwargs) if record.table.has_providers else None
    except Exception:  # noqa: BLE001 - a predicate that raises: the provider checks report it
        return None


def _check(op_cls: Any, record: OpRecord, sample: Sample, index: int | None, *, opcheck: bool, gradcheck: bool | Mapping[str, Any], reference: bool, fast_path: bool, test_utils: Sequence[str] | None, reached: dict[str, str | None]) -> None:
    direct = as_dispatched(record, sample, index)
    chosen = _chosen(record, direct)
    try:
        _run_mutation_check(op_cls, record, sample, chosen.where if chosen else None)
        if opcheck:
            _run_opcheck(op_cls, record, sample, test_utils)
        if gradcheck:
            _run_gradcheck(op_cls, record, sample, {} if gradcheck is True else gradcheck)
        if reference:
            _run_reference_check(op_cls, record, direct)
            _run_providers(op_cls, record, direct, opcheck, test_utils, reached)
        if fast_path:
            _run_fast_path(op_cls, sample)
        if record.hooks.get("vmap") is not None and not record.mutated:
            problem = vmap_disagreement(op_cls, *copy_inputs(sample))
            if problem is not None:
                raise _CheckFailed("vmap check", f"{record.where('vmap')} {problem}; the rule must batch as the loop does (is each out_dims where its output's batch dimension is?)")
    except _CheckFailed as e:
        detail = e.detail  # what the provider checks raise ("provider" in e.check) names its provider
        if chosen is not None and not (chosen.own or "provider" in e.check or chosen.where in detail):
            detail = f"provider {chosen.name!r} of {chosen.where}, chosen for the sample: {detail}"
        raise AssertionError(f"{record.qualname}, {label(sample, index)}: {e.check} failed: {detail}") from e.__cause__


# --------------------------------------------------------------------------- public API


def check_sample(op_cls: Any, sample: Sample | tuple[Any, ...], *, opcheck: bool = True, gradcheck: bool | Mapping[str, Any] = True, reference: bool = True, fast_path: bool = True, test_utils: Sequence[str] | None = None) -> None:
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
    record = record_of(op_cls)
    sample = to_sample(sample, record, 0)
    _check(op_cls, record, sample, None, opcheck=opcheck, gradcheck=gradcheck, reference=reference, fast_path=fast_path, test_utils=test_utils, reached={})


def check_op(
    op_cls: Any, samples: Iterable[Sample | tuple[Any, ...]] | None = None, *, opcheck: bool = True, gradcheck: bool | Mapping[str, Any] = True, reference: bool = True,
    fast_path: bool = True, test_utils: Sequence[str] | None = None, strict: bool = False,
) -> dict[str, str]:
    """Check an op on each of its samples, each check on its own copies of the sample's Tensors:
    first undeclared writes (one call through the dispatcher, failing when the kernel wrote to a
    Tensor argument ``mutates_args`` does not name), then opcheck, gradcheck, reference, fast path
    vs dispatcher and, for an op with a ``vmap`` rule and no written argument, ``torch.vmap`` over 3
    examples (positional Tensors batched at dim 0, floating ones scaled x1, x1.5, x2) vs each call.

    Args:
        op_cls: the op class (a concrete ``CustomOp`` subclass).
        samples: :class:`Sample` objects or tuples of positional arguments; default: what the
            op's ``samples()`` hook returns (a ``ValueError`` when it has none).
        opcheck: run ``torch.library.opcheck(op_cls.op, args, kwargs, test_utils=...)``.
        gradcheck: when the op has a ``backward``, run ``torch.autograd.gradcheck`` on
            double-precision copies of the sample's floating-point Tensors, differentiating
            those with ``requires_grad=True`` (if none has it: every positional one); samples
            without floating-point Tensors are skipped. A dict instead of ``True``: gradcheck's
            options (``{"eps": 1e-3, "atol": 1e-2, "rtol": 1e-2}`` for an op that computes
            in float32 by spec, whatever its inputs' dtype).
        reference: when the op has a ``reference`` (what ``opclass.decompositions`` decomposes
            it into), compare its result with the op's (``torch.testing.assert_close``, with the
            ``atol``/``rtol`` of the op's own kernel, ``@opclass.provider(atol=...)`` on
            ``default``, else the defaults), both under ``no_grad``; not for ops that mutate their arguments. For an
            op with providers, instead, each kernel available on the sample's device, as if
            chosen: one that accepts the sample passes the write check, opcheck and the fake
            kernel's outputs (dtype, shape, strides), and agrees (writes included; the provider's
            ``atol``/``rtol``) with the reference, else ``default``, else the op's own kernel for
            the device; one that declines it leaves it to another that serves it; one flagged
            ``batch_invariant`` gives row i of a batch as it gives row i alone.
        fast_path: call the op every way it can be called (the class call, the Python guard's
            call function where the native guard is active, and ``op_cls.op``, the dispatcher)
            on independent copies and compare the exception or the output (types, metadata,
            ``grad_fn``, version counters, values, which output is an input), what ``backward``
            does, the inputs afterwards and their gradients.
        test_utils: the opcheck test utils; default all four, without ``test_faketensor`` and
            ``test_aot_dispatch_dynamic`` when the op has no fake kernel (no ``abstract``, no
            ``default``, and none that opclass generates).
        strict: fail when a kernel of an op with providers went unchecked.

    Returns:
        The kernels of an op with providers that no sample checked (unavailable here, on a
        device no sample is on, declining every sample, a ``batch_invariant`` claim with no
        sample of several rows): name -> why; a ``UserWarning`` lists them too.

    Raises:
        AssertionError: a check failed (or, with ``strict``, a kernel went unchecked); the message
            names the op, the sample (index and name), the check and the provider checked.
        TypeError: a sample does not bind to the op's parameters (kernels, predicates and the
            reference get each sample as the dispatcher hands it over: a tuple for a list as a
            list, an int for a float as a float).
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
    record = record_of(op_cls)
    reached: dict[str, str | None] = {}
    for index, sample in enumerate(samples_of(op_cls, samples)):
        _check(op_cls, record, sample, index, opcheck=opcheck, gradcheck=gradcheck, reference=reference, fast_path=fast_path, test_utils=test_utils, reached=reached)
    unchecked = {name: why for name, why in reached.items() if why is not None}
    if unchecked:
        listed = "; ".join(f"{record.where(name)}: {why}" for name, why in unchecked.items())
        if strict:
            raise AssertionError(f"{record.qualname}: unchecked (strict=True): {listed}")
        warnings.warn(f"{record.qualname}: check_op could not check {listed}", UserWarning, stacklevel=2)
    return unchecked


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
        record = record_of(op_cls)
        instead = f"leave {record.cls_name} out here and call opclass.testing.check_op({record.cls_name}, samples=[...]) in a test"
        for index, sample in enumerate(samples_of(op_cls, None, instead)):
            sample = sample if sample.name else Sample(sample.args, sample.kwargs, name=str(index))
            params.append(pytest.param(op_cls, sample, id=f"{record.qualname}[{sample.name}]"))
    return pytest.mark.parametrize(("op", "sample"), params)


@contextlib.contextmanager
def platform(cuda: str = "cuda", capability: tuple[int, int] | None = None) -> Iterator[None]:
    """Choose providers, inside the block, as on another platform: ``cuda="rocm"`` (a HIP build)
    and the compute ``capability`` of the current CUDA device (``None``: none). Every op's choice
    is compiled again on entry and on exit; process-wide (not for one thread).

    Example:
        >>> import torch, opclass
        >>> from opclass.testing import platform
        >>> class DocsHopper(opclass.CustomOp, name="docs_platform::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        ...     hopper = opclass.provider(capability=(9, 0))(staticmethod(lambda x: 0 - x))
        >>> from torch._subclasses.fake_tensor import FakeTensorMode
        >>> with FakeTensorMode():
        ...     x = torch.empty(4, device="cuda")  # no GPU needed
        >>> with platform(capability=(9, 0)):
        ...     opclass.which_provider(DocsHopper, x)
        'hopper'
        >>> with platform(capability=(8, 0)):
        ...     opclass.which_provider(DocsHopper, x)
        'default'
        >>> opclass.remove(DocsHopper)
    """
    if cuda not in ("cuda", "rocm"):
        raise ValueError(f"opclass.testing.platform: cuda={cuda!r} is no platform of the cuda device type: write 'cuda' or 'rocm'")
    before = orders.set_facts(orders.Facts(cuda, capability))
    refresh_all()
    try:
        yield
    finally:
        orders.set_facts(before)
        refresh_all()
