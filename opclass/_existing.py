"""Extending an op defined elsewhere (``existing=True``): a ``TORCH_LIBRARY`` op from C++, or a
``Library("ns", "DEF")`` op from Python.

The class never defines the op. Its install is a ``Library(ns, "FRAGMENT")`` holding only the
class's own registrations, so removing or redefining the class (``lib._destroy()``) takes away
exactly what it added: the op, and the kernels it had, stay as they were. The rules, as
``torch.library.register_fake`` / ``register_autograd`` / ``register_kernel`` apply them:

* the schema is the dispatcher's; the class's annotations, where given, must agree with it;
* the class may add a kernel only where the op has none (a device kernel for a device the op has
  no kernel for, ``abstract`` when the op has no fake kernel, ``setup_context``/``backward`` when it
  has no autograd kernel): it never overrides one, it says so at class creation;
* of opclass's core kernels only the Autograd one is added, and only for a class with an autograd
  formula; a kernel the op already had is no opclass kernel, so the call plan leaves its device
  to the dispatcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import _C

from ._autograd import build_autograd_functions, make_autograd_kernel
from ._record import OpRecord
from ._register import OpLibrary, _backend_select_kernel, _device_arg

if TYPE_CHECKING:
    from ._hooks import Hook

__all__ = ["find_schema", "schema_text", "conflicts", "has_fake", "attach", "register_core", "own_keys"]

# Keys holding an autograd kernel of the op's own (a formula would be shadowed or would shadow it).
_AUTOGRAD_KEYS = ("Autograd", "AutogradCPU", "AutogradCUDA", "AutogradOther", "CompositeImplicitAutograd")
# Keys whose kernel serves FakeTensor/Meta already (``abstract`` would be a second fake kernel).
_FAKE_KEYS = ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd")


def find_schema(qualname: str) -> torch._C.FunctionSchema | None:
    """The dispatcher's schema of ``ns::name[.overload]``, or ``None`` if no such op is defined."""
    name, _, overload = qualname.partition(".")
    try:
        _C._dispatch_find_schema_or_throw(name, overload)
    except RuntimeError:
        return None
    for schema in _C._jit_get_schemas_for_operator(name):
        if schema.overload_name == overload:
            return schema
    return None


def schema_text(schema: torch._C.FunctionSchema) -> str:
    """``(args) -> returns``: the schema without its name, as ``OpSpec.schema_str`` holds it."""
    text = str(schema)
    return text[text.index("(") :]


def _kernel_at(qualname: str, key: str, own: set[str]) -> str | None:
    """Where the op's kernel at ``key`` was registered (``None``: none, or the class's own)."""
    if key in own or not _C._dispatch_has_kernel_for_dispatch_key(qualname, key):
        return None
    for line in _C._dispatch_dump(qualname).splitlines():
        head, _, rest = line.partition(": ")
        if head.split("[")[0] == key:
            return f"{key}: {rest.split(' :: ')[0]}"
    return key


def _python_fake(qualname: str) -> str | None:
    kernel = torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel
    return f"a fake kernel registered at {kernel.source}" if kernel is not None else None


def has_fake(qualname: str) -> bool:
    """The op runs under FakeTensor already (a fake/Meta kernel, or a composite one that serves Meta)."""
    return _python_fake(qualname) is not None or any(_kernel_at(qualname, k, set()) for k in _FAKE_KEYS)


def conflicts(qualname: str, defined: dict[str, Any], hooks: dict[str, Hook], own: set[str]) -> list[tuple[str, str, str]]:
    """``(hook, what the op already has, fix)`` for each hook that would replace a kernel of the op.

    ``own`` holds the dispatch keys the class's earlier install registered (a redefinition
    replaces those, as for any op).
    """
    found: list[tuple[str, str, str]] = []
    for name in defined:
        hook = hooks[name]
        if hook.backend:
            key = "CompositeExplicitAutograd" if hook.device_type is None else _C._dispatch_key_for_device(hook.device_type)
            keys = [key, "CompositeImplicitAutograd"] if hook.device_type is None else [key]
            where = next((w for w in (_kernel_at(qualname, k, own) for k in keys) if w), None)
            if where is not None:
                device = "every device" if hook.device_type is None else f"{hook.device_type} tensors"
                found.append((name, f"{qualname} already has a kernel for {device} ({where})", f"drop {name}: the op's own kernel stays in charge"))
        elif name == "abstract":
            where = None if "Meta" in own else (_python_fake(qualname) or next((w for w in (_kernel_at(qualname, k, own) for k in _FAKE_KEYS) if w), None))
            if where is not None:
                found.append((name, f"{qualname} already has a fake kernel ({where})", "drop abstract: the op's own fake kernel stays in charge"))
        elif name in ("setup_context", "backward", "jvp"):
            where = next((w for w in (_kernel_at(qualname, k, own) for k in _AUTOGRAD_KEYS) if w), None)
            if where is not None:
                found.append((name, f"{qualname} already has an autograd kernel ({where})", "drop setup_context and backward: the op's own autograd kernel stays in charge"))
        elif name == "eager_autograd":
            found.append((name, "differentiates through opclass's own kernels, and this op was defined elsewhere", "give the op setup_context and backward instead"))
        elif name == "vmap":
            where = _kernel_at(qualname, "FuncTorchBatched", own)
            if where is not None:
                found.append((name, f"{qualname} already has a batching rule ({where})", "drop vmap: the op's own rule stays in charge"))
        elif name == "autocast" and isinstance(defined[name], dict):
            for device_type in defined[name]:
                try:
                    key = "Autocast" + _C._dispatch_key_for_device(device_type)
                except (RuntimeError, TypeError):
                    continue  # the hook's own check names a bad device type
                where = _kernel_at(qualname, key, own)
                if where is not None:
                    found.append((name, f"{qualname} already has an autocast kernel for {device_type} ({where})", f"drop {device_type!r} from autocast"))
    return found


def attach(record: OpRecord) -> None:
    """The install's fragment, for an op that exists already (nothing is defined)."""
    record.lib = OpLibrary(record.namespace)
    packet = getattr(getattr(torch.ops, record.namespace), record.name)
    record.op = getattr(packet, record.overload or "default")


def register_core(record: OpRecord) -> None:
    """opclass's core kernels that are right for a foreign op: the Autograd kernel, only with a
    formula (as ``torch.library.register_autograd``), and BackendSelect when the class's own
    device kernels need one to be reached."""
    lib = record.lib
    assert lib is not None
    name = record.overload_name()
    # The Functions are built in any case: the call function and torch.func entry use them.
    record.make_autograd_function, record.fast_functions = build_autograd_functions(record)
    if record.backward is not None:
        lib.impl(name, make_autograd_kernel(record), "Autograd", with_keyset=True)
    if not any("Tensor" in str(a.type) for a in record.schema.arguments) and any(k is not None for k in record.kernels):
        index = _device_arg(record.schema)
        if index is not None and not _C._dispatch_has_kernel_for_dispatch_key(record.qualname, "BackendSelect"):
            lib.impl(name, _backend_select_kernel(record, index), "BackendSelect", with_keyset=True)


def own_keys(record: OpRecord | None) -> set[str]:
    """The dispatch keys an earlier install of the class registered."""
    if record is None or record.lib is None:
        return set()
    registrations: list[Any] = record.lib.registrations
    return {r.key for r in registrations}

