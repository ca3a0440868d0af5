"""Debug mode (``OPCLASS_DEBUG=1`` when an op is defined): each of its kernels (a device kernel,
a provider, a ``composite`` or ``autograd`` body) is wrapped to check, on every real call, what
nothing else checks at run time:

- the kernel wrote to no Tensor argument the op does not declare in ``mutates_args``: version
  counters, and values too (a write through ``.numpy()`` moves no counter);
- the fake kernel agrees with the real one: run on FakeTensor copies of the same arguments, it
  gives the outputs' shape, dtype, device and strides (those of dimensions longer than 1).

A mismatch raises, naming the op, the hook and the fix. Every call path (the class call,
``torch.ops``, a compiled graph) runs the wrapped kernel; an op defined without the variable
pays nothing (``opclass.testing`` runs the write check anyway). The user's ``TorchDispatchMode``s
never see the checks' copies and comparisons. A body on traced or batched Tensors
(``torch.compile``, ``make_fx``, ``torch.func``) is checked by version counters alone: a write
is caught while tracing, before the graph (which runs no opclass code) exists. The variable is
read when an op is defined; the first op defined with it while ops defined without it are live
warns (once a process), naming them.

Example:
    >>> from opclass.builtin_hooks import debug
    >>> debug.ENV
    'OPCLASS_DEBUG'
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import torch
from torch.utils._pytree import tree_leaves, tree_map_only

from opclass.core.types import same_values, tensors_in
from opclass.errors import first_line, user_stacklevel
from opclass.install.fake import has_fake_kernel, says_no_fake_kernel
from opclass.install.record import live_records

if TYPE_CHECKING:
    from opclass.define.spec import OpSpec
    from opclass.install.record import OpRecord

ENV = "OPCLASS_DEBUG"
_MODES = threading.local()
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
_unchecked: weakref.WeakSet[OpRecord] = weakref.WeakSet()  # ops whose kernels were installed without the checks
_warned = False


def enabled() -> bool:
    """Whether ops defined now get the debug checks: ``OPCLASS_DEBUG`` read as a switch (any case);
    anything else is refused rather than guessed."""
    value = os.environ.get(ENV, "")
    if value.strip().lower() in _ON + _OFF:
        return value.strip().lower() in _ON
    raise ValueError(f"{ENV}={value!r} is not a switch: set it to 1 (or true, yes, on) for debug mode, to 0 (or false, no, off) or unset it for none")


def _shown() -> str:
    return f"debug mode ({ENV})"


class Watched(NamedTuple):
    """A Tensor argument the op does not declare mutated, as it was before the kernel ran."""

    name: str
    tensor: torch.Tensor
    version: int
    values: torch.Tensor | None  # a copy, for a Tensor with values (not fake, meta or sparse)


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):  # no storage (sparse...): the Tensor itself
        return id(t)


def _real(t: torch.Tensor) -> bool:
    """A plain dense Tensor with values (FakeTensors and meta Tensors have none; a torch.func
    transform's wrapper may hold a batch, whose values no comparison can read)."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and t.device.type != "meta" and not torch._C._functorch.is_functorch_wrapped_tensor(t)


def watched(spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Watched]:
    """Each Tensor argument the op does not declare mutated, with its version and values; not
    inference Tensors (no version counter) nor Tensors sharing storage with a declared one (a view
    shares its base's counter, which a declared write moves)."""
    values = spec.arguments.values(args, kwargs)
    tensors = [(a.name, a.written, t) for a in spec.arguments for t in tensors_in((values[a.index],))]
    written = {_storage(t) for _, declared, t in tensors if declared}
    return [
        Watched(n, t, t._version, t.detach().clone() if _real(t) else None)
        for n, declared, t in tensors
        if not declared and not t.is_inference() and _storage(t) not in written
    ]


def undeclared_write(where: str, spec: OpSpec, before: list[Watched]) -> str | None:
    """The error for the first watched Tensor that was written to, or ``None``."""
    for name, t, version, values in before:
        if t._version != version:
            seen = "its version counter moved"
        elif values is not None and not same_values(values, t.detach()):
            seen = "its values changed, though its version counter did not: a write torch cannot see, e.g. through .numpy()"
        else:
            continue
        keyword = f"mutates_args={(*spec.mutated_names, name)!r}"
        return (
            f"{where} wrote to {name!r} ({seen}), but the op does not declare that it mutates {name!r}, "
            "so torch.compile, autograd and functionalization assume it is unchanged: "
            f"add {keyword} to the class statement (class {spec.cls_name}(CustomOp, ..., {keyword})), "
            f"or write to a copy instead ({name} = {name}.clone() first)"
        )
    return None


def _meta(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device}, stride={value.stride()})"
    return repr(value)


def _arguments(spec: OpSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    # Every argument, defaults included: the fast path passes them, the dispatcher leaves them out.
    given = zip(spec.arguments.names, spec.arguments.values(*spec.arguments.complete(args, kwargs)))
    return ", ".join(f"{n}={_meta(v) if not isinstance(v, (list, tuple)) else '[' + ', '.join(map(_meta, v)) + ']'}" for n, v in given)


def _disagreement(real: Any, fake: Any) -> str | None:
    """How the fake output ``fake`` differs from the real ``real``, or ``None``."""
    if isinstance(real, torch.Tensor) != isinstance(fake, torch.Tensor):
        return f"the fake kernel gave {_meta(fake)} where the kernel returned {_meta(real)}"
    if not isinstance(real, torch.Tensor):
        return None
    for what in ("dtype", "device"):
        if getattr(real, what) != getattr(fake, what):
            return f"{what} {getattr(fake, what)} from the fake kernel, {getattr(real, what)} from the kernel"
    shape = tuple(fake.shape)
    # An unbacked size (torch.library.get_ctx().new_dynamic_size()) has no value to compare.
    if len(shape) != real.dim() or any(isinstance(f, int) and f != r for f, r in zip(shape, real.shape)):
        return f"shape {shape} from the fake kernel, {tuple(real.shape)} from the kernel"
    # Compilers lay out their buffers by the fake strides; those of dimensions of size 1 do not matter.
    if real.numel() and any(isinstance(f, int) and n > 1 and f != r for f, r, n in zip(fake.stride(), real.stride(), real.shape)):
        return f"strides {fake.stride()} from the fake kernel, {real.stride()} from the kernel (shape {tuple(real.shape)})"
    return None


def fake_disagrees(record: OpRecord, where: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> str | None:
    """Run the op's fake kernel on FakeTensor copies of ``args``/``kwargs`` (which the kernel at
    ``where`` just ran on, returning ``out``): the error if its outputs disagree, else ``None``."""
    if not has_fake_kernel(record) or record.op is None:
        return None
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fake_where = record.fake_where or f"{record.qualname} (the fake kernel opclass generates)"
    mode = getattr(_MODES, "mode", None)
    if mode is None:  # one per thread: making one costs more than the check itself
        mode = _MODES.mode = FakeTensorMode(shape_env=ShapeEnv())
    fake_args, fake_kwargs = tree_map_only(torch.Tensor, lambda t: mode.from_tensor(t.detach(), static_shapes=True), (args, kwargs))
    try:
        with mode:
            fake_out = record.op(*fake_args, **fake_kwargs)
    except Exception as e:  # noqa: BLE001 - any error is the fake kernel's mistake here
        if says_no_fake_kernel(e):
            return None  # the op cannot run under torch.compile at all, which says so there
        problem = f"raised {first_line(e)}"
    else:
        reals, fakes = tree_leaves(out), tree_leaves(fake_out)
        if len(reals) != len(fakes):
            problem = f"gave {len(fakes)} outputs where the kernel returned {len(reals)}"
        else:
            found = next(((i, d) for i, (r, f) in enumerate(zip(reals, fakes)) if (d := _disagreement(r, f)) is not None), None)
            if found is None:
                return None
            problem = f"disagrees with {where} on output {found[0]}: {found[1]}" if len(reals) > 1 else f"disagrees with {where}: {found[1]}"
    return (
        f"{fake_where}: the fake kernel {problem}, called with {_arguments(record, args, kwargs)}. torch.compile and torch.export trust the fake kernel: "
        "make it build outputs exactly as the kernel returns them (e.g. torch.empty_like(x), x.new_empty(shape, dtype=...), torch.empty_strided(size, stride) "
        "for a layout other than contiguous), or make the kernel return contiguous Tensors (.contiguous())"
    )


def wrap(record: OpRecord, hook: str, fn: Callable[..., Any], tolerances: Any = None, *, fake: bool = True) -> Callable[..., Any]:
    """``fn`` as an install registers it: itself where debug mode is off (nothing to pay); else
    ``fn`` raising ``RuntimeError`` when it writes to an argument not in ``mutates_args``, when
    (``fake``) it returns what the fake kernel does not promise, and, for a provider (``tolerances``
    has its ``atol`` and ``rtol``), when it disagrees with the op's ``reference`` (else ``default``).
    ``fake=False`` for a body (``composite``, ``autograd``: it also runs on traced and batched
    Tensors, and holds its fake kernel in itself). ``repr(record)`` says when debug mode is on."""
    if not enabled():
        _unchecked.add(record)
        return fn
    if _shown not in record.shown:
        record.shown.append(_shown)
        _warn_if_late(record)
    where = record.where(hook)
    # On an .out or in-place overload the provider is the functional one adapted: compared where it is functional.
    reference = None if tolerances is None or record.convention.kind != "functional" else record.hooks.get("reference") or record.hooks.get("default")

    @functools.wraps(fn)
    def debug_kernel(*args: Any, **kwargs: Any) -> Any:
        real = all(_real(t) for t in tensors_in((*args, *kwargs.values())))
        # The user's dispatch modes (a body runs under them) see what the op does, never the check.
        with torch._C._DisableTorchDispatch():
            before = watched(record, args, kwargs)
            copies = tree_map_only(torch.Tensor, lambda t: t.detach().clone(), (args, kwargs)) if reference is not None else None
        result = fn(*args, **kwargs)
        # A result the op cannot return gets the output contract's error naming the kernel, as
        # without debug mode (before the fake kernel is compared with what it never promised).
        record.outputs.finish(where, args, kwargs, result)
        with torch._C._DisableTorchDispatch():
            problem = undeclared_write(where, record, before)
        if problem is None and fake and real:
            problem = fake_disagrees(record, where, args, kwargs, result)
            if problem is None and reference is not None and reference is not fn:
                problem = _disagrees_with_reference(record, where, reference, copies, (args, kwargs), result, tolerances)
        if problem is not None:
            raise RuntimeError(problem)
        return result

    return debug_kernel


def _warn_if_late(record: OpRecord) -> None:
    """Warn, once, that ops defined before the switch was turned on are not checked."""
    global _warned
    earlier = [] if _warned else [r.qualname for r in live_records() if r in _unchecked and r.qualname != record.qualname]
    if not earlier:
        return
    _warned = True
    named = ", ".join(earlier[-3:]) + (f" and {len(earlier) - 3} more" if len(earlier) > 3 else "")
    warnings.warn(
        f"{record.qualname} is defined in {_shown()}, but {named}, defined earlier without it, {'is' if len(earlier) == 1 else 'are'} not checked: "
        f"{ENV} is read when an op is defined. To check them too, set {ENV} before the library that defines them is imported "
        f"(or in the environment that starts Python)",
        UserWarning,
        stacklevel=user_stacklevel(),  # the class statement
    )


def disagreement(record: OpRecord, where: str, fn: Callable[..., Any], tolerances: Any, args: Any, kwargs: Any, by: str) -> str | None:
    """How ``fn`` (a provider, with its ``atol``/``rtol`` in ``tolerances``) disagrees with the op's
    ``reference`` (else ``default``) on these arguments, each run on its own copies; ``None``
    where it agrees. ``by`` says who compares, in the message."""
    reference = record.hooks.get("reference") or record.hooks.get("default")
    if reference is None or reference is fn:
        return None
    mine, copies = (tree_map_only(torch.Tensor, lambda t: t.detach().clone(), (args, kwargs)) for _ in range(2))
    with torch.no_grad():
        result = fn(*mine[0], **mine[1])
    return _disagrees_with_reference(record, where, reference, copies, mine, result, tolerances, by)


def _disagrees_with_reference(record: OpRecord, where: str, reference: Callable[..., Any], copies: Any, inputs: Any, result: Any, tolerances: Any, by: str = "debug mode compares them on every call") -> str | None:
    """The reference, run on copies of the inputs, against a provider's result and writes."""
    with torch.no_grad():
        expected = reference(*copies[0], **copies[1])
    atol, rtol = tolerances.tolerances(expected)
    try:
        torch.testing.assert_close(tree_leaves(result), tree_leaves(expected), atol=atol, rtol=rtol)
        got, want = record.arguments.values(*inputs), record.arguments.values(*copies)
        torch.testing.assert_close([got[i] for i in record.mutated], [want[i] for i in record.mutated], atol=atol, rtol=rtol)
    except AssertionError as e:
        ref = record.where("reference" if "reference" in record.hooks else "default")
        return f"{where} disagrees with {ref} ({by}): {first_line(e)}; fix the provider, or give it atol=/rtol= in opclass.provider(...)"
    return None
