"""Plugins: installed distributions that add providers to ops. A distribution declares, in the
entry-point group ``opclass.providers``, entries ``name = "module:function"``; the function takes
no argument and registers providers, typically with ``opclass.add_provider("ns::op", name,
"module:attr", ...)``, whose module is imported only when the provider is first chosen. opclass
loads every plugin once per process, before the first op class is defined (or at
:func:`load_plugins`); ``OPCLASS_DISABLED_PLUGINS=name,name`` turns plugins off (read at import,
as ``OPCLASS_PROVIDERS`` is). A plugin that fails to load, or whose function raises, breaks
nothing: a ``UserWarning`` names it, its distribution and the error, and :func:`plugins` lists it.

(The module is ``_plugins``: a submodule ``opclass.plugins`` would hide the function ``opclass.plugins``.)

Example:
    >>> import opclass
    >>> opclass.load_plugins()
    >>> all(p.status in ("loaded", "disabled") or p.status.startswith("failed: ") for p in opclass.plugins())
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
import threading
import warnings
from typing import NamedTuple

from opclass import lifecycle
from opclass.errors import did_you_mean, first_line, user_stacklevel
from opclass.install import orders

__all__ = ["GROUP", "PluginInfo", "load_plugins", "plugins", "loading"]

#: The entry-point group plugins are declared in.
GROUP = "opclass.providers"


class PluginInfo(NamedTuple):
    """One plugin, as :func:`plugins` lists it.

    Example:
        >>> import opclass
        >>> opclass.PluginInfo("vendor", "vendor-kernels", "1.0", "vendor_kernels.plugin:register", "loaded").status
        'loaded'
    """

    name: str
    #: The distribution that declares it, and its version.
    distribution: str
    version: str
    #: What it runs: ``"module:function"``.
    value: str
    #: ``"loaded"``, ``"disabled"`` (``OPCLASS_DISABLED_PLUGINS`` names it), or ``"failed: <error>"``.
    status: str


_found: list[PluginInfo] | None = None
_lock = threading.Lock()
_loading: contextvars.ContextVar[str | None] = contextvars.ContextVar("opclass_plugin", default=None)


def load_plugins() -> None:
    """Load every installed plugin, once per process (later calls do nothing): opclass does it
    before the first op class is defined. Costs one ``importlib.metadata.entry_points`` scan of
    the installed distributions, and what the plugins' functions do. Example: in the
    :mod:`opclass._plugins` docstring."""
    global _found
    orders.check_env()
    found: list[PluginInfo] = []
    with _lock:
        if _found is not None:
            return
        # Set first: a plugin that defines op classes (or another thread) does not load them again.
        _found = found
    with contextlib.suppress(ValueError):  # not waiting there (any more)
        lifecycle.FIRST.remove(load_plugins)
    found += [_load(entry) for entry in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name)]
    known = [p.name for p in found]
    for name in sorted(orders.DISABLED_PLUGINS - set(known)):
        guess = did_you_mean(name, known)
        fix = f"did you mean {guess!r}?" if guess else f"the plugins installed are {', '.join(known) or 'none'}"
        warnings.warn(f"{orders.PLUGINS_ENV} names {name!r}, which is no installed plugin: {fix}", UserWarning, stacklevel=user_stacklevel())


def _load(entry: importlib.metadata.EntryPoint) -> PluginInfo:
    dist = entry.dist
    info = PluginInfo(entry.name, dist.name if dist is not None else "?", dist.version if dist is not None else "?", entry.value, "disabled")
    if entry.name in orders.DISABLED_PLUGINS:
        return info
    token = _loading.set(f"plugin {info.name} ({info.distribution} {info.version})")
    try:
        entry.load()()
    except (Exception, SystemExit) as e:  # a plugin never breaks the program that has it installed
        status = f"failed: {first_line(e)}"
        warnings.warn(
            f"opclass plugin {info.name} ({info.distribution} {info.version}, {info.value}) {status}; what it added before the error stays. "
            f"Fix or update {info.distribution}, or turn the plugin off: {orders.PLUGINS_ENV}={info.name}",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
        return info._replace(status=status)
    finally:
        _loading.reset(token)
    return info._replace(status="loaded")


def plugins() -> list[PluginInfo]:
    """The plugins installed, each with its distribution, version, value and status, in name
    order (loading them first, as :func:`load_plugins`, where nothing did). Example: in the
    :mod:`opclass._plugins` docstring."""
    load_plugins()
    return list(_found or ())


def loading() -> str | None:
    """``plugin <name> (<distribution> <version>)`` while that plugin's function runs in this
    context (the origin of the providers it adds), else ``None``."""
    return _loading.get()
