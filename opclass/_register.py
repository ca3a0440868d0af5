"""Dispatcher registrations every op gets, whatever hooks it defines.

Built through ``torch.library.Library`` primitives directly rather than ``torch.library.custom_op``:
the same safety checks (output aliasing, version bumps, the missing-formula error), fewer layers.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch import _C
from torch.fx.node import _side_effectful_functions

from . import _eager
from ._alias import check_outputs, output_is_fresh
from ._default_fake import default_as_fake, no_fake_message
from ._autograd import build_autograd_functions, bump_mutated, make_autograd_kernel
from ._plan import Registration
from ._record import OpRecord
from ._returns import converter, exact_predicate
from ._shield import shield

_AFTER_AD_INPLACE = _C._after_ADInplaceOrView_keyset



class OpLibrary(torch.library.Library):
    """A ``Library`` fragment whose Python kernels let go of the op's objects on :meth:`release`.

    torch keeps the Python kernels of a destroyed op name alive until that name is registered
    again. Released, a removed op's kernels no longer hold its record, the user's functions or
    whatever those hold: opclass's own kernels have their closure cells emptied (no wrapper
    frame on the call path); anything else (the user's functions, torch's wrappers) is
    registered through a one-slot trampoline that is emptied instead.
    """

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
        self._slots: list[list[Any]] = []
        self._ours: list[Callable[..., Any]] = []
        #: Every kernel registered through this fragment, with the hook that was installing.
        self.registrations: list[Registration] = []
        #: The hook whose installer runs now (``None``: opclass's own registrations).
        self.installing: str | None = None

    def _releasable(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        shield(fn)
        if (getattr(fn, "__module__", None) or "").startswith("opclass.") and getattr(fn, "__closure__", None):
            self._ours.append(fn)
            return fn
        slot = [fn]
        self._slots.append(slot)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            return slot[0](*args, **kwargs)

        return shield(kernel)

    def impl(self, op_name: Any, fn: Any, dispatch_key: str = "", *, with_keyset: bool = False, allow_override: bool = True) -> None:
        if callable(fn):
            name = f"{op_name._schema.name}.{op_name._overloadname}" if isinstance(op_name, torch._ops.OpOverload) else str(op_name)
            name = name.rpartition("::")[2].removesuffix(".default")
            self.registrations.append(Registration(name, dispatch_key or "CompositeImplicitAutograd", fn, self.installing))
        super().impl(op_name, self._releasable(fn) if callable(fn) else fn, dispatch_key, with_keyset=with_keyset, allow_override=allow_override)  # type: ignore[no-untyped-call]

    def _register_fake(self, op_name: str, fn: Callable[..., Any], _stacklevel: int = 1, *, allow_override: bool = True) -> None:
        super()._register_fake(op_name, self._releasable(fn), _stacklevel=_stacklevel + 1, allow_override=allow_override)  # type: ignore[no-untyped-call]

    def release(self) -> None:
        for slot in self._slots:
            slot[0] = _removed
        for fn in self._ours:
            for cell in fn.__closure__ or ():
                cell.cell_contents = None
        self._slots.clear()
        self._ours.clear()
        self.registrations.clear()


def _removed(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this opclass op was removed")


def define(record: OpRecord) -> None:
    """Create the op: a fresh ``Library`` fragment owning every registration of this record."""
    lib = OpLibrary(record.namespace)
    record.lib = lib
    tags = tuple(record.tags)
    if torch.Tag.pt2_compliant_tag not in tags:
        tags += (torch.Tag.pt2_compliant_tag,)
    lib.define(record.overload_name() + record.schema_str, tags=tags)  # type: ignore[no-untyped-call]
    packet = getattr(getattr(torch.ops, record.namespace), record.name)
    record.op = getattr(packet, record.overload or "default")


def register_core(record: OpRecord) -> None:
    """Autograd, ADInplaceOrView (mutable ops) and BackendSelect (no Tensor inputs) kernels."""
    lib = record.lib
    assert lib is not None
    name = record.overload_name()
    record.make_autograd_function, record.fast_functions = build_autograd_functions(record)
    if record.eager_autograd:
        # Differentiated through its kernel: torch.func sees the kernel.
        record.functorch_entry = _eager.direct_entry(record)
        lib.impl(name, _eager.make_autograd_kernel(record), "Autograd", with_keyset=True)
    else:
        lib.impl(name, make_autograd_kernel(record), "Autograd", with_keyset=True)
    if record.mutated:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Warning only once for all operators")
            lib.impl(name, _version_bump_kernel(record), "ADInplaceOrView", with_keyset=True)
    if not record.schema.returns and not record.mutated and record.op is not None:
        # Only its side effect makes such an op useful: keep compilers from dropping it.
        _side_effectful_functions.add(record.op)
    if not _has_tensor_arg(record.schema):
        index = _device_arg(record.schema)
        if index is not None:
            lib.impl(name, _backend_select_kernel(record, index), "BackendSelect", with_keyset=True)


def register_default_fake(record: OpRecord) -> None:
    """The fake kernel when the class has no ``abstract``: generated where torch generates one,
    else ``default`` run on the fake tensors (see :mod:`opclass._default_fake`)."""
    assert record.lib is not None
    if record.fake is not None:
        return
    returns = record.schema.returns
    if record.is_inplace:
        fake: Callable[..., Any] = lambda *args, **kwargs: args[0]  # noqa: E731
    elif record.is_out:
        outs = [a.name for a in record.schema.arguments if a.name in record.mutated_names and a.kwarg_only]

        def fake(*args: Any, **kwargs: Any) -> Any:
            values = tuple(kwargs[n] for n in outs)
            return values[0] if len(values) == 1 else values

    elif not returns:
        fake = lambda *args, **kwargs: None  # noqa: E731
    elif None in record.kernels:
        fake = default_as_fake(record.qualname, record.cls_name, record.kernels[None].checked)
    else:
        message = no_fake_message(record.qualname, record.cls_name)

        def fake(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(message)

    record.fake = fake
    record.lib._register_fake(record.overload_name(), fake, _stacklevel=1)


def checked_kernel(record: OpRecord, hook: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped with the output contract the schema promises (aliasing, in-place, out=), its
    result converted as the dispatcher would (a wrong one raises, naming the op and ``hook``)."""
    where = f"{record.qualname} ({record.cls_name}.{hook})"
    convert = converter(record.schema)
    is_exact = exact_predicate(record.schema)
    if record.is_inplace:
        tensor = torch.Tensor

        def inplace_kernel(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if result is not args[0]:
                raise RuntimeError(f"{where}: an operator tagged with torch.Tag.inplace must return its first argument.")
            return result if type(result) is tensor else convert(where, result)  # the exact check, inline

        return inplace_kernel
    if record.is_out:
        outs = [a.name for a in record.schema.arguments if a.name in record.mutated_names]

        def out_kernel(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            got = result if isinstance(result, tuple) else (result,)
            if len(got) != len(outs) or any(r is not kwargs[n] for r, n in zip(got, outs)):
                raise RuntimeError(f"{where}: an operator tagged with torch.Tag.out must return its mutable keyword-only arguments.")
            return result if is_exact(result) else convert(where, result)

        return out_kernel
    if not record.schema.returns:

        def none_kernel(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if result is not None:
                convert(where, result)  # raises, naming the op and the hook
            return result

        return none_kernel
    fresh = output_is_fresh()
    n_returns = len(record.schema.returns)
    # Only where the op returns one Tensor does a fresh result need nothing more.
    several = [str(r.real_type) for r in record.schema.returns] != ["Tensor"]

    def functional_kernel(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if several or not fresh(result):
            # Converted here rather than by the dispatcher: a wrong result raises the same clear
            # error as on the fast path; and aliasing is judged on what the op returns.
            if not is_exact(result):
                result = convert(where, result)
            check_outputs(where, n_returns, args, kwargs, result)
        return result

    return functional_kernel


def _version_bump_kernel(record: OpRecord) -> Callable[..., Any]:
    positions = [i for i in record.mutated if not record.schema.arguments[i].kwarg_only]
    names = [record.schema.arguments[i].name for i in record.mutated if record.schema.arguments[i].kwarg_only]
    op = record.op
    assert op is not None
    bump = _C._increment_version

    def ad_inplace_or_view(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        out = op.redispatch(keyset & _AFTER_AD_INPLACE, *args, **kwargs)
        # After the kernel (torch bumps before): a kernel that raises leaves versions untouched.
        bump_mutated(bump, args, kwargs, positions, names)
        return out

    return ad_inplace_or_view


def _has_tensor_arg(schema: torch._C.FunctionSchema) -> bool:
    return any("Tensor" in str(a.type) for a in schema.arguments)


def _device_arg(schema: torch._C.FunctionSchema) -> int | None:
    for i, a in enumerate(schema.arguments):
        if str(a.type) == "Device":
            return i
    return None


def _backend_select_kernel(record: OpRecord, index: int) -> Callable[..., Any]:
    """Ops without Tensor inputs pick their kernel from the ``device`` argument."""
    arg = record.schema.arguments[index]
    default = arg.default_value if arg.has_default_value() else None
    op = record.op
    assert op is not None

    def backend_select(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if arg.kwarg_only:
            device = kwargs.get(arg.name, default)
        else:
            device = args[index] if index < len(args) else default
        key = getattr(_C.DispatchKey, _C._dispatch_key_for_device(torch.device(device).type))  # type: ignore[arg-type]
        return op.redispatch(_C.DispatchKeySet(key), *args, **kwargs)

    return backend_select
