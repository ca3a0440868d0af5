"""Every public name of opclass, imported together: ``opclass`` imports this module when a public
name is first used, so that ``import opclass.mypy`` (every mypy run) does not import torch.

Example:
    >>> from opclass import _public
    >>> "cpu" in _public.hooks()
    True
"""

from __future__ import annotations

# "X as X": re-exported, for the type checkers that see opclass's names through this module.
from opclass._op import CustomOp as CustomOp, OpMeta as OpMeta
from opclass.core.names import DEVICE_TYPES as DEVICE_TYPES
from opclass.core.native import guard_backend as guard_backend, guard_info as guard_info
from opclass.decompose import decompositions as decompositions
from opclass.define.conventions import style as style
from opclass.define.annotations import SUPPORTED_TYPES as SUPPORTED_TYPES, Alias as Alias, Int as Int, SchemaType as SchemaType
from opclass.define.hookspec import Hook as Hook, HookContext as HookContext, hooks as hooks
from opclass.define.hookspec import register_hook as register_hook, unregister_hook as unregister_hook
from opclass.errors import OpDefinitionError as OpDefinitionError
from opclass.builtin_hooks.kernels import device_hook as device_hook
from opclass.install.record import OpRecord as OpRecord
from opclass.lifecycle import remove as remove, remove_namespace as remove_namespace
from opclass.builtin_hooks.providers import provider as provider
from opclass.providers import add_provider as add_provider, explain_providers as explain_providers, remove_provider as remove_provider
from opclass.providers import set_provider_mode as set_provider_mode, set_provider_order as set_provider_order
from opclass.providers import use_providers as use_providers
from opclass.tune import Tuning as Tuning, load_tuning as load_tuning, tune_providers as tune_providers
from opclass._plugins import PluginInfo as PluginInfo, load_plugins as load_plugins, plugins as plugins
from opclass.providers import ProviderInfo as ProviderInfo, provider_order as provider_order, providers_of as providers_of, which_provider as which_provider
