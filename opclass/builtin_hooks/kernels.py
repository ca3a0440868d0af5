"""The kernel hooks: one per device type (``cpu``, ``cuda``...), ``default`` for every device,
and ``abstract``, the fake kernel.

Example:
    >>> import opclass
    >>> [h for h, hook in opclass.hooks().items() if hook.kernel][:3], opclass.hooks()["abstract"].backend
    (['default', 'cpu', 'cuda'], False)
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

from opclass.core.compat import MUTATION_TAGS, OUT_TAG
from opclass.core.shield import shield
from opclass.core.tracing import raise_in_trace
from opclass.define.hookspec import Hook, HookContext
from opclass.errors import first_line, formatdef
from opclass.builtin_hooks import debug
from opclass.builtin_hooks.providers import check_predicates
from opclass.install.existing import fake_keys
from opclass.install.fake import needs_real_data, no_fake, register_fake
from opclass.install.record import OpRecord
from opclass.install.options import Options, options_of
from opclass.install.table import slot_key

__all__ = ["device_hook", "abstract_hook", "composite_hook", "autograd_hook"]


def device_hook(device_type: str | None) -> Hook:
    """The kernel hook for one device type (``None``: ``default``, every device).

    Register it to give a device type that opclass does not list (e.g. a renamed PrivateUse1
    backend) its own hook name.

    Example:
        >>> import opclass
        >>> opclass.device_hook("cuda").name
        'cuda'
    """
    try:
        key = slot_key(device_type)
    except RuntimeError as e:
        raise ValueError(f"{device_type!r} is not a torch device type: {e}") from None
    name = device_type or "default"

    def install(record: OpRecord, fn: Callable[..., Any]) -> None:
        # Its flags and tolerances, where @opclass.provider marks it; its device is the hook's.
        options = dataclasses.replace(options_of(fn) or Options(None), devices=None if device_type is None else (device_type,))
        record.table.add(name, debug.wrap(record, name, fn), options, own=True, raw=fn)

    def check(fn: Any, ctx: HookContext) -> None:
        # Its devices are the hook's; supports= and available= apply (the op then chooses per call).
        options = options_of(fn)
        if options is None:
            return
        if options.devices is not None and options.devices != (device_type,):
            on = f"runs on {device_type} tensors" if device_type else "runs on every device type"
            ctx.fail(f"@opclass.provider({', '.join(map(repr, options.devices))}) on the op's own {name} kernel, which {on}", "drop the device from @opclass.provider, or make it a provider with another name")
        if (problem := check_predicates(options, ctx.arguments)) is not None:
            ctx.fail(*problem)

    every = device_type is None
    serves = "every device" if every else f"{device_type} tensors"
    keys = (key, "CompositeImplicitAutograd") if every else (key,)
    occupies = ((keys, f"a kernel for {serves}", f"drop {name}: the op's own kernel stays in charge"),)
    doc = f"kernel for {serves}".replace("every device", "every device type")
    fallback = _no_kernel if every else None
    return Hook(name, install, check=check, kernel=True, backend=True, device_type=device_type, doc=doc, occupies=lambda value: occupies, aliases=("forward",) if every else (), fallback=fallback, conventions=True)


def _no_kernel(record: OpRecord) -> None:
    """``default``'s fallback: where no kernel serves a call on CPU (an op with a ``cuda`` kernel
    only, or only an ``autograd`` body, under inference_mode), the dispatcher's error names no
    hook and no fix; a stand-in at the CPU key raises the same ``NotImplementedError`` with them.
    (Only there: the machine a first test runs on, often without a GPU. Other device keys stay
    empty, so ``_dispatch_has_kernel_for_dispatch_key`` still says which devices the op serves.)"""
    if record.existing or {r.key for r in record.lib.registrations} & {"CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd"}:
        return
    cls, body = record.cls_name, next((r.hook for r in record.lib.registrations if r.key == "Autograd" and r.hook), None)
    if body is not None:
        message = (
            f"{record.qualname} ({cls}.{body}): the op's only kernel is at the Autograd key, which torch.inference_mode() skips: "
            f"call the op outside inference_mode (under torch.no_grad() it runs), or make {cls}.{body}'s code the op's own kernel "
            f"({cls}.default or {cls}.cpu, with setup_context and backward for its gradients, in place of {cls}.{body})"
        )
    else:
        hooks = ", ".join(f"{cls}.{k.hook}" for k in record.kernels.values()) or "none"
        message = f"{record.qualname} ({cls}) has no kernel for cpu tensors (it has {hooks}): define {cls}.cpu, or {cls}.default for every device type"

    def no_kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    no_kernel.opclass_stand_in = True  # type: ignore[attr-defined]  # the plan: not a kernel
    record.lib.impl(record.overload_name(), shield(no_kernel), "CPU")


def _check_abstract(fn: Any, ctx: HookContext) -> None:
    tag = next((t for t in MUTATION_TAGS if t in ctx.tags), None)
    if tag is None:
        return
    # Not an error: it works as written (and wins), as torch.library allows one too.
    message = (
        f"{formatdef(ctx.cls_name, 'abstract', fn)}: unnecessary: opclass generates the fake kernel of an op "
        f"tagged torch.Tag.{tag.name} (it returns the mutated argument{'s' if tag is OUT_TAG else ''}); remove it"
    )
    code = getattr(fn, "__code__", None)
    if code is not None:
        warnings.warn_explicit(message, UserWarning, code.co_filename, code.co_firstlineno)
    else:
        warnings.warn(message, UserWarning, stacklevel=2)


def default_fake(record: OpRecord) -> None:
    """The fake kernel of an op whose class gives none (``abstract``'s fallback): generated where
    torch generates one (in-place, out=, no outputs), else ``default`` run on the fake tensors,
    else an error that says to define ``abstract``.

    A ``default`` kernel made of torch ops computes its outputs' metadata just as well on
    FakeTensors (as a ``CompositeExplicitAutograd`` kernel serves Meta); one that cannot (NumPy,
    reading values, data-dependent shapes) gets the error an op without a fake kernel gets."""
    if record.fake is not None or record.decomposes or record.had_fake:
        return
    message = (
        f"{record.qualname} has no fake kernel, which torch.compile, torch.export and FakeTensor need: "
        f"define {record.cls_name}.abstract (same arguments; build outputs with torch.empty_like etc.)"
    )
    # The op's own default (the op in torch ops), whatever kernel another hook put in its place.
    default, aliased = record.hooks.get("default"), record.outputs.aliased
    fake: Callable[..., Any]
    runs: str | None = None  # the hook whose kernel runs as the fake one
    if record.outputs.returned:  # in place, out=: it returns the arguments it writes
        fake = lambda *args, **kwargs: aliased(args, kwargs)  # noqa: E731
    elif not record.schema.returns:
        fake = lambda *args, **kwargs: None  # noqa: E731
    elif default is not None:
        runs = record.where("default")
        kernel, cls_name = record.outputs.checked(runs, default), record.cls_name

        def fake(*args: Any, **kwargs: Any) -> Any:
            try:
                return kernel(*args, **kwargs)
            except Exception as e:
                if not needs_real_data(e):
                    raise  # the kernel's own error (a bad argument...), as in eager mode
                raise_in_trace(no_fake(f"{message}. {cls_name}.default cannot run on fake tensors: {first_line(e)}"), e)

    else:

        def fake(*args: Any, **kwargs: Any) -> Any:
            raise_in_trace(no_fake(message))

        no_fake(message, fake)
    register_fake(record, fake)
    record.fake_where = runs


def abstract_hook() -> Hook:
    """The ``abstract`` hook: the op's fake kernel, for FakeTensor (torch.compile, torch.export);
    without it, :func:`default_fake`."""
    occupies = ((fake_keys(), "a fake kernel", "drop abstract: the op's own fake kernel stays in charge"),)
    return Hook(
        "abstract", lambda record, fn: register_fake(record, fn, record.where("abstract")), check=_check_abstract, kernel=True, occupies=lambda value: occupies,
        aliases=("fake", "meta", "fake_impl", "register_fake", "abstract_impl"), fallback=default_fake,
        doc="fake (meta) kernel for torch.compile/export; torch.library.get_ctx() works inside",
    )


def _check_body(fn: Any, ctx: HookContext, beside: frozenset[str] = frozenset()) -> None:
    """No kernel the body would shadow, but those at ``beside``: the keys that still run where
    the body does not."""
    shadowed = {"Meta", *fake_keys()}
    for hook, value in ctx.defined.items():
        other = ctx.hooks[hook]
        if hook == ctx.hook or other.occupies is None:
            continue
        keys = {k for keys, _, _ in other.occupies(value) for k in keys}
        if not other.backend and keys <= beside:
            continue
        if other.backend or keys & shadowed or any(k.startswith("Autograd") for k in keys):
            if not other.backend:
                fix = f"drop {hook}: the body serves those calls too"
            elif ctx.hook == "composite":
                fix = f"drop {hook} (the body serves every device type), or drop composite and keep {hook}, with setup_context and backward if it needs gradients"
            else:
                fix = f"keep autograd alone (it may call the {hook} code as a plain function), or drop autograd and keep {hook}, with setup_context and backward for its gradients"
            when = "serves every call but those under inference_mode" if beside else "runs before any other kernel could"
            ctx.fail(f"the op is its {ctx.hook} body, which {when}; {ctx.cls_name}.{hook} would {'serve only those' if beside else 'never run'}", fix)


def _torch_ops_only(where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A composite body, whose NumPy call under grad gets the op, the hook and the fix (torch's
    own hint, ``.detach().numpy()``, would drop the gradient without a word)."""

    def composite_body(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if "Can't call numpy() on Tensor that requires grad" not in str(e):
                raise
            raise RuntimeError(
                f"{where} calls .numpy() on a Tensor that requires grad, but a composite body must be torch ops, "
                "which autograd differentiates through (.detach() would drop the gradient): write the kernel as default (or cpu) "
                "with setup_context and backward"
            ) from e

    return composite_body


def _body_hook(
    name: str, key: str, doc: str, aliases: tuple[str, ...], body: Callable[[str, Any], Any] = lambda where, fn: fn, beside: frozenset[str] = frozenset()
) -> Hook:
    """A hook whose function is the op's only kernel, at ``key``; ``body(where, fn)``: the function
    registered; ``beside``: the keys of the kernels that may come with it (they run where it does not)."""

    def install(record: OpRecord, fn: Callable[..., Any]) -> None:
        record.decomposes = True
        where = record.where(name)
        record.lib.impl(record.overload_name(), shield(record.outputs.checked(where, debug.wrap(record, name, body(where, fn), fake=False))), key)

    occupies = (((key,), f"a kernel at {key}", f"drop {name}: the op's own kernels stay in charge"),)
    return Hook(name, install, check=lambda fn, ctx: _check_body(fn, ctx, beside), kernel=True, backend=True, occupies=lambda value: occupies, aliases=aliases, doc=doc)


def composite_hook() -> Hook:
    """The ``composite`` hook: the op's body, made of torch ops, registered as a
    ``CompositeImplicitAutograd`` kernel (``Library.impl(..., "CompositeImplicitAutograd")``).

    Autograd differentiates through the body, FakeTensor runs it, TorchDispatchModes and
    ``run_decompositions`` see the ops it calls, not the op; ``torch.compile`` and
    ``torch.export`` decompose it. The class call always goes through the dispatcher: the op
    has no kernel of its own that a fast path could call.

    Example:
        >>> import torch, opclass
        >>> class DocsSquare(opclass.CustomOp, name="docs_kernels::square"):
        ...     @staticmethod
        ...     def composite(x: torch.Tensor) -> torch.Tensor:
        ...         return x * x
        >>> DocsSquare(torch.tensor(3.0, requires_grad=True)).grad_fn.name()
        'MulBackward0'
        >>> opclass.remove(DocsSquare)
    """
    doc = "the op as torch ops (CompositeImplicitAutograd): autograd, modes and decompositions see through it"
    return _body_hook("composite", "CompositeImplicitAutograd", doc, ("decomposition", "implicit", "body"), _torch_ops_only)


def autograd_hook() -> Hook:
    """The ``autograd`` hook: the op's only kernel, at the ``Autograd`` key
    (``Library.impl(..., "Autograd")``), as torch's own ``quantized_decomposed`` ops write one:
    typically it applies an ``autograd.Function`` of its own. It runs on every call but those under
    ``inference_mode``, where autograd is off: there an ``abstract`` beside it serves FakeTensors
    and meta tensors (torch's pairing of an Autograd kernel with a Meta one), and a real Tensor
    has no kernel. The class call always goes through the dispatcher.

    Example:
        >>> import torch, opclass
        >>> class DocsTwice(opclass.CustomOp, name="docs_kernels::twice"):
        ...     @staticmethod
        ...     def autograd(x: torch.Tensor) -> torch.Tensor:
        ...         return x * 2
        >>> DocsTwice(torch.ones(1))
        tensor([2.])
        >>> opclass.remove(DocsTwice)
    """
    doc = "the op's only kernel, at the Autograd key (as Library.impl(..., 'Autograd')): no backend kernel; an abstract serves inference_mode"
    return _body_hook("autograd", "Autograd", doc, ("autograd_impl", "autograd_kernel"), beside=frozenset(fake_keys()))
