"""Names the runtime and the ``opclass.mypy`` plugin share: kernel device types and class keywords.

No torch here: mypy imports the plugin in every run, and the plugin reads these.

Example:
    >>> from opclass._names import CLASS_KEYWORDS, DEVICE_TYPES
    >>> DEVICE_TYPES[:2], CLASS_KEYWORDS[0]
    (('cpu', 'cuda'), 'name')
"""

from __future__ import annotations

__all__ = ["CLASS_KEYWORDS", "DEVICE_TYPES"]

#: Device types that get a kernel hook of their own name (``def cuda(...)``).
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "mtia", "xla", "ipu", "maia", "hip", "privateuseone")

#: The keywords ``CustomOp.__init_subclass__`` takes.
CLASS_KEYWORDS = ("name", "namespace", "mutates_args", "schema", "tags", "existing")
