"""The kernel hooks: one per device type (``cpu``, ``cuda``...), ``default`` for every device,
and ``abstract``, the fake kernel.

Example:
    >>> import opclass
    >>> [h for h, hook in opclass.hooks().items() if hook.kernel][:3], opclass.hooks()["abstract"].backend
    (['default', 'cpu', 'cuda'], False)
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from torch import _C

from opclass.core.compat import MUTATION_TAGS, OUT_TAG
from opclass.core.shield import shield
from opclass.define.hookspec import Hook, HookContext
from opclass.errors import formatdef
from opclass.hooks import debug
from opclass.install.core import register_fake
from opclass.install.existing import fake_keys
from opclass.install.record import Kernel, OpRecord

__all__ = ["device_hook", "abstract_hook", "install_kernel"]


def device_hook(device_type: str | None) -> Hook:
    """The kernel hook for one device type (``None``: ``default``, every device).

    Register it to give a device type that opclass does not list (e.g. a renamed PrivateUse1
    backend) its own hook name.

    Example:
        >>> import opclass
        >>> opclass.device_hook("cuda").name
        'cuda'
    """
    if device_type is None:
        key = "CompositeExplicitAutograd"
        name = "default"
    else:
        try:
            key = _C._dispatch_key_for_device(device_type)
        except RuntimeError as e:
            raise ValueError(f"{device_type!r} is not a torch device type: {e}") from None
        name = device_type

    def install(record: OpRecord, fn: Callable[..., Any]) -> None:
        install_kernel(record, name, device_type, debug.debug_kernel(record, name, fn) if debug.enabled() else fn)

    serves = "every device" if device_type is None else f"{device_type} tensors"
    keys = (key, "CompositeImplicitAutograd") if device_type is None else (key,)
    occupies = ((keys, f"a kernel for {serves}", f"drop {name}: the op's own kernel stays in charge"),)
    doc = f"kernel for {serves}".replace("every device", "every device type")
    return Hook(name, install, kernel=True, backend=True, device_type=device_type, doc=doc, occupies=lambda value: occupies, aliases=("forward",) if device_type is None else ())


def install_kernel(record: OpRecord, hook: str, device_type: str | None, fn: Callable[..., Any]) -> None:
    """``fn`` as the op's kernel for ``device_type`` (``None``: every device), at its key: the
    dispatcher calls it checked by the output contract, the fast path calls it as it is."""
    where = record.where(hook)
    # shield: the fast path calls fn itself, with no registered wrapper around it.
    kernel = record.kernels[device_type] = Kernel(hook, shield(fn), record.outputs.checked(where, fn), where)
    key = "CompositeExplicitAutograd" if device_type is None else _C._dispatch_key_for_device(device_type)
    with warnings.catch_warnings():
        # A traced kernel replaces the device hook's at its own key on purpose.
        warnings.filterwarnings("ignore", message="Warning only once for all operators")
        record.lib.impl(record.overload_name(), kernel.checked, key)


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


def abstract_hook() -> Hook:
    """The ``abstract`` hook: the op's fake kernel, for FakeTensor (torch.compile, torch.export)."""
    occupies = ((fake_keys(), "a fake kernel", "drop abstract: the op's own fake kernel stays in charge"),)
    return Hook(
        "abstract", lambda record, fn: register_fake(record, fn, record.where("abstract")), check=_check_abstract, kernel=True, occupies=lambda value: occupies,
        aliases=("fake", "meta", "fake_impl", "register_fake", "abstract_impl"),
        doc="fake (meta) kernel for torch.compile/export; torch.library.get_ctx() works inside",
    )
