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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._public import *

__all__ = [
    "Alias", "CustomOp", "DEVICE_TYPES", "Hook", "HookContext", "Int", "OpDefinitionError", "OpMeta", "OpRecord", "PluginInfo", "ProviderInfo", "SUPPORTED_TYPES", "SchemaType", "Tuning",
    "add_provider", "decompositions", "device_hook", "explain_providers", "guard_backend", "guard_info", "hooks", "load_plugins", "load_tuning", "plugins", "provider", "provider_order", "providers_of", "register_hook",
    "remove", "remove_namespace", "remove_provider", "set_provider_mode", "set_provider_order", "style", "tune_providers", "unregister_hook", "use_providers", "which_provider",
]
__version__ = "0.1.0"

if not TYPE_CHECKING:
    # The public names come with torch, which opclass.mypy (imported by every mypy run) must not
    # pay for: the first one used imports them all (_public.py). Type checkers see the import
    # above instead, and no __getattr__ that would let every misspelt attribute of opclass pass.

    def __getattr__(name):
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from . import _public

        globals().update((n, getattr(_public, n)) for n in __all__)
        return globals()[name]

    def __dir__():
        return sorted({*globals(), *__all__})
