"""Skipping tests that need a torch feature some supported torch release lacks.

What the installed torch has is decided by ``opclass._compat`` (by feature, not by version); the
reasons name the torch version in use and the missing feature.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from opclass.core import compat as _compat

# The tags opclass gives rules to: torch 2.11 and 2.12 have neither.
_TAGS = {"inplace": _compat.INPLACE_TAG, "out": _compat.OUT_TAG}


def missing_tags(*names: str) -> str | None:
    """Why a test needing ``torch.Tag.<name>`` for each of ``names`` cannot run here, or None."""
    missing = [f"torch.Tag.{n}" for n in names if _TAGS[n] is None]
    return f"torch {torch.__version__} has no {' or '.join(missing)}" if missing else None


def needs_tag(*names: str) -> pytest.MarkDecorator:
    """Skip the test where torch lacks ``torch.Tag.<name>`` for one of ``names``."""
    reason = missing_tags(*names)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def tags_in(source: str) -> tuple[str, ...]:
    """The tags of ``_TAGS`` that Python ``source`` reads as ``<...>.Tag.<name>`` (not in strings)."""
    found = {
        node.attr
        for node in ast.walk(ast.parse(textwrap.dedent(source)))
        if isinstance(node, ast.Attribute)
        and node.attr in _TAGS
        and (getattr(node.value, "attr", None) == "Tag" or getattr(node.value, "id", None) == "Tag")
    }
    return tuple(sorted(found))



def missing_opaque_values() -> str | None:
    """Why config objects cannot run here (torch 2.11: no plain class as an opaque value), or None."""
    if _compat.plain_opaque_values():
        return None
    return f"torch {torch.__version__} takes no plain class as an opaque value type (config objects)"


#: Skip where config objects cannot be op arguments (torch 2.11).
needs_plain_opaque_values = pytest.mark.skipif(missing_opaque_values() is not None, reason=missing_opaque_values() or "")
