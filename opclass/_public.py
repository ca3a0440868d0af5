"""Every public name of opclass, imported together: ``opclass`` imports this module when a public
name is first used, so that ``import opclass.mypy`` (every mypy run) does not import torch.

Example:
    >>> from opclass import _public
    >>> "cpu" in _public.hooks()
    True
"""

from __future__ import annotations

from opclass._op import CustomOp, OpMeta
from opclass.core.names import DEVICE_TYPES
from opclass.core.native import guard_backend, guard_info
from opclass.decompose import decompositions
from opclass.define.annotations import SUPPORTED_TYPES, Int, SchemaType
from opclass.define.hookspec import Hook, HookContext, hooks, register_hook, unregister_hook
from opclass.errors import OpDefinitionError
from opclass.builtin_hooks.kernels import device_hook
from opclass.install.record import OpRecord
from opclass.lifecycle import remove, remove_namespace
from opclass.builtin_hooks.providers import provider
from opclass.providers import add_provider, explain_providers, remove_provider, set_provider_mode, set_provider_order, tune_providers, use_providers
