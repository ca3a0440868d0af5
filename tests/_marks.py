"""Skip markers shared by the test files (those for torch features are in ``_versions.py``)."""

from __future__ import annotations

import pytest

import opclass

#: Why a test that needs the native guard is skipped (also for ``pytest.skip`` where it depends on runtime state).
NATIVE_GUARD_MISSING = "native guard not built (python -m opclass.native)"

#: Skip where the native guard is not the active guard.
needs_native = pytest.mark.skipif(opclass.guard_backend() != "native", reason=NATIVE_GUARD_MISSING)
