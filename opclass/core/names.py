"""Names the runtime and the type checkers share: device types, class keywords, and what type
checkers must know of the built-in hooks.

No torch here: mypy imports the ``opclass.mypy`` plugin, which reads these, in every run.
:data:`HOOK_KINDS` is what the hooks say of themselves (``opclass.hooks()``) as far as type
checkers need it, kept equal to the registry by ``tests/test_typing.py``.

Example:
    >>> from opclass.core.names import CLASS_KEYWORDS, DEVICE_TYPES, HOOK_KINDS
    >>> DEVICE_TYPES[:2], CLASS_KEYWORDS[0], HOOK_KINDS["abstract"]
    (('cpu', 'cuda'), 'name', 'kernel')
"""

from __future__ import annotations

__all__ = ["CLASS_KEYWORDS", "DEVICE_TYPES", "HOOK_KINDS"]

#: Device types that get a kernel hook of their own name (``def cuda(...)``).
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "mtia", "xla", "ipu", "maia", "hip", "privateuseone")

#: The keywords ``CustomOp.__init_subclass__`` takes.
CLASS_KEYWORDS = ("name", "namespace", "mutates_args", "schema", "tags", "pt2_compliant", "existing", "out", "inplace")

#: Every built-in hook by kind, in registration order: ``"backend"`` (a kernel: it takes the op's
#: arguments and makes the class an op), ``"kernel"`` (one that makes no op), ``"static"`` (another
#: static method), ``"value"`` (a class attribute) or ``"members"`` (kernels of any name, marked).
HOOK_KINDS: dict[str, str] = {
    "default": "backend",
    **{device: "backend" for device in DEVICE_TYPES},
    "abstract": "kernel",
    "composite": "backend",
    "autograd": "backend",
    "setup_context": "static",
    "backward": "static",
    "jvp": "static",
    "eager_autograd": "value",
    "vmap": "static",
    "autocast": "value",
    "torch_dispatch": "value",
    "sharding": "static",
    "reference": "kernel",
    "samples": "static",
    "traceable": "value",
    "providers": "members",
    "provider_orders": "value",
}

#: The name torch gives an op's overload without a name (``torch.ops.ns.op.default``).
DEFAULT_OVERLOAD = "default"
