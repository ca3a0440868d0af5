"""The kernels opclass registers for every op, whatever hooks it defines: Autograd,
ADInplaceOrView (mutable ops), BackendSelect (no Tensor inputs), and the fake kernel of an op
whose class gives none. An op defined elsewhere gets only the Autograd kernel, with a formula
(as ``torch.library.register_autograd``), and BackendSelect where its class's kernels need it.

Example:
    >>> import torch
    >>> from opclass.install.core import bump_mutated
    >>> x = torch.zeros(2)
    >>> bump_mutated((x,), {}, (0,), ())
    >>> x._version
    1
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C
from torch.fx.node import _side_effectful_functions

from opclass.core import native
from opclass.core.tracing import raise_in_trace
from opclass.errors import first_line
from opclass.core.types import CPU, CUDA, FAST_DEVICES, GRAD, arg_type, tensors_in
from opclass.install.functions import AFTER_AUTOGRAD, Call, functions, functorch_entry
from opclass.install.outputs import output_is_fresh

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

_ADIV = _C.DispatchKey.ADInplaceOrView
_NO_FAKE = "__opclass_no_fake__"  # marks the fake kernel that only says to define one
_AFTER_AD_INPLACE = _C._after_ADInplaceOrView_keyset


def register_core(record: OpRecord) -> None:
    """Register the core kernels (after the hooks' installers and the call plan)."""
    lib, name, schema = record.lib, record.overload_name(), record.schema
    if record.decomposes:
        return  # the body's own ops do all of it
    if record.functorch_entry is None:
        record.functorch_entry = functorch_entry(record)
    if not record.existing or record.backward is not None:
        lib.impl(name, (record.autograd_kernel or make_autograd_kernel)(record), "Autograd", with_keyset=True)
    if record.mutated and not record.existing:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Warning only once for all operators")
            lib.impl(name, _version_bump_kernel(record), "ADInplaceOrView", with_keyset=True)
    if not schema.returns and not record.mutated and not record.existing:
        # Only its side effect makes such an op useful: keep compilers from dropping it.
        _side_effectful_functions.add(record.op)  # type: ignore[arg-type]
    index = next((i for i, a in enumerate(schema.arguments) if str(a.type) == "Device"), None)
    needs_select = not record.existing or (any(k is not None for k in record.kernels) and not _C._dispatch_has_kernel_for_dispatch_key(record.qualname, "BackendSelect"))
    if index is not None and needs_select and not any("Tensor" in str(a.type) for a in schema.arguments):
        lib.impl(name, _backend_select_kernel(record, index), "BackendSelect", with_keyset=True)


def register_fake(record: OpRecord, fn: Callable[..., Any], where: str | None = None) -> None:
    """``fn`` as the op's fake kernel; ``where`` names a hook's (``"ns::op (Cls.abstract)"``).

    A hook's fake kernel meets the output contract the real kernels meet (the count, no alias of
    an input, the type, with the errors they raise), and an error from reading data names it."""
    record.fake = fn
    record.fake_where = where
    if where is not None:
        fn = _contract_fake(record, where, fn)
    record.lib._register_fake(record.overload_name(), fn, _stacklevel=1)


def _contract_fake(record: OpRecord, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    finish = record.outputs.finish

    def fake_kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except RuntimeError as e:
            if not _reads_data(e):
                raise
            raise_in_trace(
                RuntimeError(
                    f"{where}: the fake kernel reads a Tensor's values ({first_line(e)}), which FakeTensors do not have: "
                    "build the outputs from shapes, dtypes and devices alone; for an output size that depends on the "
                    "values, take it from torch.library.get_ctx().new_dynamic_size()"
                ),
                e,
            )
        try:
            return finish(where, args, kwargs, out)
        except (RuntimeError, TypeError) as e:
            raise_in_trace(e, e.__cause__)  # the contract's own error: said first under torch.compile too

    return fake_kernel


def register_default_fake(record: OpRecord) -> None:
    """The fake kernel of an op whose class gives none: generated where torch generates one
    (in-place, out=, no outputs), else ``default`` run on the fake tensors, else an error that
    says to define ``abstract``.

    A ``default`` kernel made of torch ops computes its outputs' metadata just as well on
    FakeTensors (as a ``CompositeExplicitAutograd`` kernel serves Meta); one that cannot (NumPy,
    reading values, data-dependent shapes) gets the error an op without a fake kernel gets."""
    message = (
        f"{record.qualname} has no fake kernel, which torch.compile, torch.export and FakeTensor need: "
        f"define {record.cls_name}.abstract (same arguments; build outputs with torch.empty_like etc.)"
    )
    default = record.kernels.get(None)
    outs = record.outputs.outs
    fake: Callable[..., Any]
    runs: str | None = None  # the hook whose kernel runs as the fake one
    if record.is_inplace:
        fake = lambda *args, **kwargs: args[0]  # noqa: E731
    elif record.is_out:
        fake = lambda *args, **kwargs: kwargs[outs[0]] if len(outs) == 1 else tuple(kwargs[n] for n in outs)  # noqa: E731
    elif not record.schema.returns:
        fake = lambda *args, **kwargs: None  # noqa: E731
    elif default is not None:
        kernel, cls_name, runs = default.checked, record.cls_name, default.where

        def fake(*args: Any, **kwargs: Any) -> Any:
            try:
                return kernel(*args, **kwargs)
            except Exception as e:
                if not needs_real_data(e):
                    raise  # the kernel's own error (a bad argument...), as in eager mode
                raise_in_trace(_no_fake(f"{message}. {cls_name}.default cannot run on fake tensors: {first_line(e)}"), e)

    else:

        def fake(*args: Any, **kwargs: Any) -> Any:
            raise_in_trace(_no_fake(message))

        setattr(fake, _NO_FAKE, True)
    register_fake(record, fake)
    record.fake_where = runs


def _no_fake(message: str) -> RuntimeError:
    error = RuntimeError(message)
    setattr(error, _NO_FAKE, True)
    return error


def says_no_fake_kernel(error: BaseException) -> bool:
    """``error`` is the one an op with no fake kernel raises on FakeTensors."""
    return getattr(error, _NO_FAKE, False)


def has_fake_kernel(record: OpRecord) -> bool:
    """The op runs under FakeTensor: a fake kernel that computes (a hook's, or one opclass
    generated), or an op defined elsewhere that had its own."""
    return record.existing if record.fake is None else not getattr(record.fake, _NO_FAKE, False)


def _reads_data(e: BaseException) -> bool:
    """The error is FakeTensor's for a read of values it does not have (``.item()``, ``bool(x)``)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return isinstance(e, (DataDependentOutputException, GuardOnDataDependentSymNode))


def needs_real_data(e: BaseException) -> bool:
    """The error says a kernel needs values or storage that fake tensors do not have (it calls
    NumPy, reads values, makes a data-dependent shape, or runs an op with no fake kernel)."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, UnsupportedOperatorException

    if _reads_data(e) or isinstance(e, (DynamicOutputShapeException, UnsupportedOperatorException)):
        return True
    # .numpy() (NumPy, np.asarray), data pointers and storage of fake/meta tensors; a torch op or
    # C++ kernel with no Meta kernel.
    text = str(e)
    return isinstance(e, (RuntimeError, NotImplementedError, TypeError)) and any(
        s in text for s in (".numpy()", "data pointer", "storage", "'Meta' backend", "meta tensor", "Meta tensor", "FakeTensor")
    )


# --------------------------------------------------------------------------- Autograd


def plain_keysets(record: OpRecord) -> dict[int, Callable[..., Any]]:
    """Raw keysets at the Autograd key that mean "plain dense tensors on one device", and the
    backend kernel that the dispatcher would reach from there (nothing else runs in between)."""
    assert record.plan is not None
    return {raw: kernel.checked for device_type, kernel in record.plan.kernels.items() for raw in _PLAIN_RAW[device_type]}


def _plain_raw(device_type: str) -> tuple[int, int]:
    key = getattr(_C.DispatchKey, FAST_DEVICES[device_type])
    keyset = _C.DispatchKeySet(key).add(getattr(_C.DispatchKey, "Autograd" + key.name))
    return keyset.raw_repr(), keyset.add(_C.DispatchKey.ADInplaceOrView).raw_repr()


_PLAIN_RAW = {device_type: _plain_raw(device_type) for device_type in FAST_DEVICES}


def make_autograd_kernel(record: OpRecord) -> Callable[..., Any]:
    """The kernel registered at the Autograd key: apply the Function only when grad is needed.

    Without grad, plain dense tensors go straight to the backend kernel instead of crossing back
    into the dispatcher; anything else (modes, Python keys, other layouts) is redispatched.
    """
    assert record.plan is not None
    is_out, functional, opname, op = record.is_out, not record.mutated, record.name, record.op
    plain = plain_keysets(record)
    # Tuples: an empty one is shared, and none of them is a container the collector tracks.
    bump_positions = tuple(i for i in record.mutated if not record.schema.arguments[i].kwarg_only)
    bump_names = tuple(record.schema.arguments[i].name for i in record.mutated if record.schema.arguments[i].kwarg_only)
    module = native.native_module()
    guard = module.guard if module is not None else None
    specs = _guard_specs(record)
    # The native guard's code per device, and that device's kernel.
    codes = {code: k for code, k in ((CPU, record.plan.kernels.get("cpu")), (CUDA, record.plan.kernels.get("cuda"))) if k is not None}
    fresh, single, finish = output_is_fresh(), record.outputs.single, record.outputs.finish
    # _any_requires_grad does not look into lists holding None; the guards do.
    optional_lists = tuple(i for i, a in enumerate(record.schema.arguments) if str(a.real_type) == "List[Optional[Tensor]]" and not a.kwarg_only)

    # The Function's apply, looked up once, on the first call that needs it (it is made then).
    apply: Callable[..., Any] | None = None

    def function_apply() -> Callable[..., Any]:
        nonlocal apply
        apply = functions(record).generic.apply
        return apply

    def autograd_kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if guard is not None and not kwargs:
            # One native call answers "plain dense tensors, one device, grad needed?".
            code = guard(specs[len(args)], *args)
            k = codes.get(code)
            if k is not None:
                if bump_positions and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
                    bump_mutated(args, kwargs, bump_positions, bump_names)
                out = k.user(*args)
                if not (single and fresh(out)):
                    out = finish(k.where, args, kwargs, out)
                return out
            if code & GRAD and functional:
                return (apply or function_apply())(*args, Call(keyset, len(args), ()))
        if _C.is_grad_enabled() and (
            _C._any_requires_grad(*args, **kwargs) or (optional_lists and _optional_list_requires_grad(args, optional_lists))
        ):
            if is_out:
                raise RuntimeError(f"{opname}(): functions with out=... arguments don't support automatic differentiation, but one of the arguments requires grad.")
            if not functional:
                check_mutation(record, args, kwargs, bump_positions, bump_names)
            # Under torch.func transforms the Function's forward dispatches the op afresh.
            call_keyset = None if _C._are_functorch_transforms_active() else keyset
            return (apply or function_apply())(*args, *kwargs.values(), Call(call_keyset, len(args), tuple(kwargs)))
        if functional and _forward_ad._current_level >= 0:
            # Dual tensors need not require grad: let the Function give tangents (or say it cannot).
            return (apply or function_apply())(*args, *kwargs.values(), Call(keyset, len(args), tuple(kwargs)))
        kernel = plain.get(keyset.raw_repr())
        if kernel is None:
            with _C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & AFTER_AUTOGRAD, *args, **kwargs)  # type: ignore[union-attr]
        if (bump_positions or bump_names) and not _C._dispatch_tls_is_dispatch_key_excluded(_ADIV):
            bump_mutated(args, kwargs, bump_positions, bump_names)
        return kernel(*args, **kwargs)  # the checked kernel

    return autograd_kernel


def check_mutation(record: OpRecord, args: tuple[Any, ...], kwargs: dict[str, Any], positions: Sequence[int], names: Sequence[str]) -> None:
    """Autograd cannot record a mutation inside a kernel: the mutated Tensor's history would stay
    as it was, and gradients through it would be silently wrong."""
    values = [(record.schema.arguments[i].name, args[i]) for i in positions if i < len(args)] + [(n, kwargs[n]) for n in names if n in kwargs]
    for name, value in values:
        if any(t.requires_grad for t in tensors_in((value,))):
            raise RuntimeError(
                f"{record.qualname} ({record.cls_name}): the op writes to {name!r}, which requires grad, and autograd "
                f"cannot record a custom op's mutation (gradients through {name!r} would be wrong). Pass a Tensor that "
                f"does not require grad ({name}.detach(), or call under torch.no_grad()), or make the op functional "
                f"(return a new Tensor instead of writing to {name!r}) and define setup_context and backward."
            )


def bump_mutated(args: tuple[Any, ...], kwargs: dict[str, Any], positions: Sequence[int], names: Sequence[str]) -> None:
    """Bump the version counter of each mutated Tensor (inference tensors are skipped)."""
    _C._increment_version(list(tensors_in([args[i] for i in positions if i < len(args)] + [kwargs[n] for n in names if n in kwargs])))


def _optional_list_requires_grad(args: tuple[Any, ...], positions: Sequence[int]) -> bool:
    return any(t is not None and t.requires_grad for i in positions if i < len(args) for t in args[i])


def _guard_specs(record: OpRecord) -> dict[int, bytes]:
    """Native-guard specs for the positional arguments the dispatcher passes, by count given."""
    letters = [arg_type(str(a.real_type)).letter for a in record.schema.arguments if not a.kwarg_only]
    return {n: "".join(letters[:n]).encode() for n in range(len(letters) + 1)}


def _version_bump_kernel(record: OpRecord) -> Callable[..., Any]:
    positions = [i for i in record.mutated if not record.schema.arguments[i].kwarg_only]
    names = [record.schema.arguments[i].name for i in record.mutated if record.schema.arguments[i].kwarg_only]
    op = record.op
    assert op is not None

    def ad_inplace_or_view(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        # Before the kernel, as custom_op does: a kernel that writes and then raises has still
        # written, and autograd must see that a Tensor it saved changed.
        bump_mutated(args, kwargs, positions, names)
        return op.redispatch(keyset & _AFTER_AD_INPLACE, *args, **kwargs)

    return ad_inplace_or_view


def _backend_select_kernel(record: OpRecord, index: int) -> Callable[..., Any]:
    """Ops without Tensor inputs pick their kernel from the ``device`` argument."""
    arg = record.schema.arguments[index]
    default = arg.default_value if arg.has_default_value() else None
    op = record.op
    assert op is not None

    def backend_select(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get(arg.name, default) if arg.kwarg_only else args[index] if index < len(args) else default
        key = getattr(_C.DispatchKey, _C._dispatch_key_for_device(torch.device(device).type))  # type: ignore[arg-type]
        return op.redispatch(_C.DispatchKeySet(key), *args, **kwargs)

    return backend_select
