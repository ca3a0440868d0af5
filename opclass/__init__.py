"""opclass: PyTorch custom operators as classes.

Example:
    >>> import torch, opclass
    >>> from torch import Tensor
    >>> class DocsAddOne(opclass.CustomOp, name="docs_init::add_one"):
    ...     @staticmethod
    ...     def default(x: Tensor) -> Tensor:
    ...         return x + 1
    >>> DocsAddOne(torch.zeros(2))
    tensor([1., 1.])
    >>> opclass.remove(DocsAddOne)
"""

from ._builtin import DEVICE_TYPES, device_hook, register_builtin_hooks
from ._native import guard_backend, guard_info
from ._hooks import Hook, HookContext, hooks, register_hook, unregister_hook
from ._op import CustomOp, OpMeta
from ._record import OpRecord, remove, remove_namespace
from ._schema import SUPPORTED_TYPES
from ._traceable import traceable_hook
from .errors import OpDefinitionError

register_builtin_hooks()
register_hook(traceable_hook())  # after the device hooks: it replaces their kernels

__all__ = [
    "CustomOp",
    "DEVICE_TYPES",
    "Hook",
    "HookContext",
    "OpDefinitionError",
    "OpMeta",
    "OpRecord",
    "SUPPORTED_TYPES",
    "device_hook",
    "guard_backend",
    "guard_info",
    "hooks",
    "register_hook",
    "remove",
    "remove_namespace",
    "unregister_hook",
]
__version__ = "0.1.0"
