"""Providers: several kernels of one op (the ``providers`` hook).

Kernel libraries ship several implementations of one op (a torch reference, a C++ or CUDA
kernel, a Triton one, a vendor's) and pick one by platform, arguments and a deployment's
priority. A *provider* is one such kernel of an op class: a name, the device types it runs on,
and optionally a predicate on the arguments (``supports``), a one-time availability check
(``available``), and flags users select on (``batch_invariant``, ``deterministic``). The op's
schema, fake kernel, autograd formula, vmap rule and sharding are the op's own: every provider
is checked against the op's signature as a kernel is, and only the kernel differs. Which one
runs for a call: the op's kernel table, :mod:`opclass.install.table`.

Example:
    >>> import torch, opclass
    >>> class DocsProvided(opclass.CustomOp, name="docs_providers::twice"):
    ...     @staticmethod
    ...     def default(x: torch.Tensor) -> torch.Tensor:
    ...         return x * 2
    ...     @opclass.provider("cpu", supports=lambda x: x.dtype == torch.float32)
    ...     @staticmethod
    ...     def added(x: torch.Tensor) -> torch.Tensor:
    ...         return x + x
    >>> opclass.explain_providers(DocsProvided, torch.ones(2)).splitlines()[1]
    '  added (cpu): runs'
    >>> opclass.remove(DocsProvided)
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
from typing import Any, Callable, Mapping, Sequence, TypeVar

import torch
from torch import _C

from opclass.builtin_hooks import debug
from opclass.core import memo
from opclass.core.names import DEVICE_TYPES
from opclass.core.types import MISTAKEN_DEVICES
from opclass.define.arguments import Arguments
from opclass.define.hookspec import MEMBER_OF, Hook, HookContext
from opclass.errors import did_you_mean
from opclass.install import orders
from opclass.install.record import OpRecord
from opclass.install.options import MARK, Options, options_of
from opclass.install.table import slot_key

__all__ = ["HOOK", "provider", "providers_hook", "provider_orders_hook", "options_of", "add", "take", "added", "check_predicates"]

HOOK = "providers"
F = TypeVar("F")


def provider(
    device: str | Sequence[str] | None = None,
    *,
    supports: Callable[..., bool] | None = None,
    available: Callable[[], bool] | None = None,
    batch_invariant: bool = False,
    deterministic: bool = False,
    atol: float | Mapping[torch.dtype, float] | None = None,
    rtol: float | Mapping[torch.dtype, float] | None = None,
    platform: str | None = None,
    capability: tuple[int, int] | tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None,
) -> Callable[[F], F]:
    """Declare a static method of an op class a provider of the op (its name: the method's).

    Args:
        device: the device type(s) it runs on (``"cuda"``, ``("cpu", "cuda")``); ``None``: every one.
        supports: ``supports(*args, **kwargs) -> bool``, called with the op's arguments as a
            kernel is (defaults filled in) before the provider may run: dtypes, sizes,
            alignment... A parameter named as an argument of the op must sit at its place; the
            answer must be ``True`` or ``False`` (anything else raises ``TypeError``).
        available: ``available() -> bool``, asked once per install: a library imports, a compute
            capability, an environment. ``ImportError``, ``OSError`` or ``RuntimeError`` counts as
            ``False``, its text as the reason; another exception is a bug and raises.
        batch_invariant: row i of a batched output does not depend on the other rows (a
            batch-invariant mode runs only such providers; ``opclass.testing.check_op`` checks it).
        deterministic: the same inputs give the same bits (a deterministic mode runs only such).
        atol, rtol: tolerances against the reference in ``opclass.testing.check_op`` and debug mode:
            one value, or one per dtype of the outputs (``{torch.float16: 1e-2, torch.float32: 1e-5}``;
            a dtype left out gets ``torch.testing.assert_close``'s defaults).
        platform: the platform it needs within its device type: ``"rocm"`` (a HIP build's
            ``cuda``) or ``"cuda"`` (NVIDIA's); given alone, the device type is ``cuda``.
        capability: the CUDA compute capabilities it runs on: ``(8, 0)`` (that or higher), or a
            window ``((8, 0), (9, 0))``, both ends included (``None`` for an open end); the
            device type is ``cuda``.

    On the op's own kernel hooks (``default``, ``cpu``...) it declares that kernel's flags,
    tolerances, ``supports`` and ``available`` (not its device: the hook's). Example: in the
    :mod:`opclass.builtin_hooks.providers` docstring.
    """
    if callable(device) or isinstance(device, staticmethod):
        raise TypeError("opclass.provider takes options: write @opclass.provider() (with parentheses) above @staticmethod")
    # Checked with the class, which errors can then name; a torch.device stands for its type.
    devices = None if device is None else tuple(getattr(d, "type", d) for d in ((device,) if isinstance(device, (str, torch.device)) else device))
    if devices is None and (platform in ("cuda", "rocm") or capability is not None):
        devices = ("cuda",)
    if capability is not None and len(capability) == 2 and all(isinstance(c, int) for c in capability):
        capability = (capability, None)  # type: ignore[assignment]  # (8, 0): that or higher
    options = Options(devices, supports, available, bool(batch_invariant), bool(deterministic), atol, rtol, platform, capability)  # type: ignore[arg-type]

    def mark(fn: F) -> F:
        inner = fn.__func__ if isinstance(fn, staticmethod) else fn
        if not callable(inner):
            raise TypeError(f"opclass.provider(...) decorates a function, not {inner!r}")
        copy = _copy(inner)  # its own options, even where one function is the provider of two ops
        setattr(copy, MARK, options)
        setattr(copy, MEMBER_OF, HOOK)
        return staticmethod(copy)  # type: ignore[return-value]

    return mark


def _copy(fn: Any) -> Any:
    if not isinstance(fn, types.FunctionType):  # a functools.partial, a bound method, a callable object

        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        sig, bound = inspect.signature(fn), fn.keywords if isinstance(fn, functools.partial) else {}
        # What it takes from the op's caller (a partial's keywords are its own), checked as a kernel's.
        call.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name not in bound])  # type: ignore[attr-defined]
        call.__name__ = call.__qualname__ = getattr(fn, "__name__", type(fn).__name__)
        call.__annotations__ = dict(getattr(fn, "__annotations__", {}))
        return call
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__annotations__, copy.__qualname__ = fn.__kwdefaults__, dict(fn.__annotations__), fn.__qualname__
    copy.__module__, copy.__doc__ = fn.__module__, fn.__doc__
    copy.__dict__.update(fn.__dict__)
    return copy


#: Providers added from outside their op's class: qualname -> name -> marked function; written
#: only by :func:`add` and :func:`take`, under the lock.
_ADDED: dict[str, dict[str, Any]] = {}
_LOCK = threading.RLock()


def add(qualname: str, name: str, fn: Any) -> None:
    """Add the marked ``fn`` as provider ``name`` of ``qualname`` (for its next install)."""
    with _LOCK:
        added = _ADDED.setdefault(qualname, {})
        if name in added:
            raise ValueError(f"{qualname} has a provider {name!r} added already: remove_provider({name!r}) first")
        added[name] = fn


def take(qualname: str, name: str) -> Any:
    """Take provider ``name`` added to ``qualname`` away; returns its function."""
    with _LOCK:
        added = _ADDED.get(qualname, {})
        if name not in added:
            raise ValueError(f"{qualname} has no provider {name!r} added with opclass.add_provider (it has: {', '.join(added) or 'none'})")
        return added.pop(name)


def added(qualname: str) -> Mapping[str, Any]:
    """The providers added to ``qualname`` from outside its class, by name."""
    with _LOCK:
        return dict(_ADDED.get(qualname, {}))


def _check(members: Mapping[str, Any], ctx: HookContext) -> None:
    for name, fn in members.items():
        options = options_of(fn)
        if options is None:
            ctx.fail(f"member {name!r} carries no provider options", "declare it with @opclass.provider(...) or opclass.add_provider")
        if not name.isidentifier():
            ctx.fail(f"{name!r} is no provider name: orders list names between ',' and ';'", "name it as a Python identifier (letters, digits, _)")
        for d in options.devices or ():
            if d not in (*DEVICE_TYPES, _C._get_privateuse1_backend_name()):
                guess = MISTAKEN_DEVICES.get(str(d).lower()) or did_you_mean(str(d), DEVICE_TYPES)
                ctx.fail(f"provider {name!r}: {d!r} is not a device type a kernel runs on (those are {', '.join(DEVICE_TYPES)})", f"did you mean {guess!r}?" if guess else "write e.g. 'cpu' or 'cuda'")
        if options.devices and not any(a.holds_tensor for a in ctx.arguments) and not any(a.is_device for a in ctx.arguments):
            ctx.fail(f"provider {name!r} runs on {', '.join(options.devices)}, but an op with no Tensor inputs cannot pick a device", "add a device: torch.device parameter, or declare it for every device")
        if (problem := _platform_problem(options)) is not None:
            ctx.fail(f"provider {name!r}: {problem[0]}", problem[1])
        if (problem := check_predicates(options, ctx.arguments)) is not None:
            ctx.fail(f"provider {name!r}: {problem[0]}", problem[1])
    if "composite" in ctx.defined or "autograd" in ctx.defined:
        ctx.fail("an op whose body is a composite or autograd kernel has no device kernel to choose", "drop the providers, or write the body as default")


def _platform_problem(options: Options) -> tuple[str, str] | None:
    platform, capability, devices = options.platform, options.capability, options.devices or ()
    if platform is not None and (platform not in orders.PLATFORMS or platform != "rocm" and devices != (platform,) or platform == "rocm" and devices != ("cuda",)):
        where = f"platform={platform!r} with device {', '.join(devices) or 'any'}"
        return f"{where} names no platform it runs on (the platforms: {', '.join(orders.PLATFORMS)}; rocm and cuda are those of the cuda device type)", "write @opclass.provider('cuda', platform='rocm'), or platform='cuda' for NVIDIA's only"
    versions = [c for c in capability or () if c is not None]
    if capability is not None and (len(capability) != 2 or not versions or not all(isinstance(c, tuple) and len(c) == 2 and all(type(n) is int for n in c) for c in versions) or devices != ("cuda",)):
        return f"capability={capability!r} is no window of CUDA compute capabilities on the cuda device type", "write capability=(8, 0) (that or higher) or capability=((8, 0), (9, 0)) (both included), with device 'cuda'"
    return None


def check_predicates(options: Options, arguments: Arguments) -> tuple[str, str] | None:
    """Why ``options.supports`` cannot be the predicate (called as the kernels are: positional
    arguments by place, keyword-only ones by name) or ``options.available`` the check (no
    arguments): ``(problem, fix)``, or ``None``. A parameter named as one of the op's arguments
    must sit at that argument's place; other names are taken by place (none can be mistaken for
    another argument)."""
    for label, check in (("supports", options.supports), ("available", options.available)):
        if check is not None and (problem := _predicate_problem(label, check, arguments if label == "supports" else None)) is not None:
            return problem
    for label, tol in (("atol", options.atol), ("rtol", options.rtol)):
        per_dtype = tol.items() if isinstance(tol, Mapping) else [(torch.float32, tol)]
        if tol is not None and not all(isinstance(d, torch.dtype) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for d, v in per_dtype):
            return f"{label}={tol!r} is no tolerance", f"write {label}=1e-5, or one per dtype: {label}={{torch.float16: 1e-2, torch.float32: 1e-5}}"
    return None


def _predicate_problem(label: str, check: Any, arguments: Arguments | None) -> tuple[str, str] | None:
    names = arguments.names if arguments is not None else []
    fix = f"write {label}=lambda {arguments.parameters(defaults=False)[1:-1] if arguments is not None else ''}: ..."
    if not callable(check):
        return f"{label}={check!r} is not callable", fix
    try:
        sig = memo.signature(check)
    except ValueError:
        return None  # a builtin without a signature: called as it is
    places = [a.name for a in arguments or () if not a.keyword_only]
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.name in places and (i >= len(places) or places[i] != p.name):
            return f"{label}() has parameter {p.name!r} at place {i + 1}, where the op has {places[i] if i < len(places) else 'no argument'!r}: it would get another argument", fix
    try:
        sig.bind(*places, **{a.name: None for a in arguments or () if a.keyword_only})
    except TypeError as e:
        return f"{label}() cannot take the op's arguments ({', '.join(names) or 'none'}): {e}", fix
    return None


def _install(record: OpRecord, members: Mapping[str, Any]) -> None:
    for name, fn in members.items():
        options = options_of(fn) or Options(None)
        record.table.add(name, debug.wrap(record, name, fn, options), options, own=False)


def _occupies(members: Any) -> list[tuple[tuple[str, ...], str, str]]:
    keys = {name: tuple(slot_key(d) for d in (options_of(fn) or Options(None)).devices or [None]) for name, fn in dict(members).items()}
    return [(k, f"a kernel where provider {name!r} would run", f"drop provider {name!r}: the op's own kernel stays in charge") for name, k in keys.items()]


def providers_hook() -> Hook:
    """The ``providers`` hook: the op's providers (see the module docstring). Its value is every
    function of the class marked with :func:`provider`, and those added with
    ``opclass.add_provider``, by name.

    Example:
        >>> import opclass
        >>> opclass.hooks()["providers"].members
        True
    """
    return Hook(
        HOOK, _install, check=_check, kernel=True, backend=True, members=True, extra=added, occupies=_occupies, conventions=True,
        doc="other kernels of the op, chosen per call by device, availability, arguments and order (@opclass.provider)",
    )


def _check_orders(value: Any, ctx: HookContext) -> None:
    fix = "write provider_orders = {'cuda': ('triton', 'default'), 'rocm': ('aiter', 'default')}: a platform to provider names"
    if not isinstance(value, Mapping) or not value:
        ctx.fail(f"must be a dict of platform -> provider names, got {value!r}", fix)
    known = [*ctx.defined.get(HOOK, {}), *(h for h in ctx.defined if ctx.hooks[h].backend and h != HOOK)]
    for platform, names in value.items():
        if platform not in orders.PLATFORMS:
            guess = did_you_mean(str(platform), orders.PLATFORMS)
            ctx.fail(f"{platform!r} is no platform (those are {', '.join(orders.PLATFORMS)})", f"did you mean {guess!r}?" if guess else fix)
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            ctx.fail(f"the order for {platform} must be a list of provider names, got {names!r}", fix)
        for name in names:
            if name not in known and name is not ... and name != orders.REST:
                guess = did_you_mean(str(name), known)
                ctx.fail(f"the order for {platform} names {name!r}, which is no provider of the op (it has {', '.join(known)})", f"did you mean {guess!r}?" if guess else "name its providers and own kernels")
        if (twice := orders.repeated(tuple(names))) is not None:
            ctx.fail(f"the order for {platform} names {twice!r} twice", "name each provider once")


def _install_orders(record: OpRecord, value: Mapping[str, Sequence[Any]]) -> None:
    record.table.platform_orders = {platform: tuple(orders.REST if n is ... else n for n in names) for platform, names in value.items()}


def provider_orders_hook() -> Hook:
    """The ``provider_orders`` hook: the op's default order of providers per platform (``cpu``,
    ``cuda``, ``rocm``...), where no order is set; an order given with ``...`` extends it.

    Example:
        >>> import opclass
        >>> opclass.hooks()["provider_orders"].staticmethod
        False
    """
    return Hook(
        "provider_orders", _install_orders, check=_check_orders, staticmethod=False, conventions=True,
        doc="dict platform -> provider names: the default order on each platform (cpu, cuda, rocm...)",
    )
