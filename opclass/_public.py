"""Every public name of opclass, imported together; ``opclass/__init__.py`` re-exports them.

They come with torch; importing ``_op`` registers the built-in hooks. ``opclass`` imports this
module when a public name is first used, not when ``opclass`` itself is imported, so that
``import opclass.mypy`` (which mypy does in every run) does not import torch.

Example:
    >>> from opclass import _public
    >>> "cpu" in _public.hooks()
    True
"""

from __future__ import annotations

from ._builtin import device_hook
from ._hooks import Hook, HookContext, hooks, register_hook, unregister_hook
from ._names import DEVICE_TYPES
from ._native import guard_backend, guard_info
from ._op import CustomOp, OpMeta
from ._record import OpRecord, remove, remove_namespace
from ._schema import SUPPORTED_TYPES
from .errors import OpDefinitionError
