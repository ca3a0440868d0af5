"""Build the native guard: ``python -m opclass.native`` (``--check`` only reports).

Example:
    >>> import opclass
    >>> opclass.guard_backend() in ("native", "python")
    True
"""

from __future__ import annotations

import argparse
import sys

from opclass.core import native as _native


def main(argv: list[str] | None = None) -> int:
    """Build (or with ``--check`` only report) the native guard; never fails set-up.

    Example:
        >>> main(["--check"])  # doctest: +ELLIPSIS
        opclass: guard ...
        0
    """
    parser = argparse.ArgumentParser(prog="python -m opclass.native", description="Build opclass's native guard.")
    parser.add_argument("--check", action="store_true", help="only report which guard is active")
    parser.add_argument("--verbose", action="store_true", help="show the compiler's output")
    ns = parser.parse_args(argv)
    if not ns.check:
        before = _native.built()
        stamp = before.stat().st_mtime_ns if before is not None else None
        try:
            path = _native.build(verbose=ns.verbose)
        except Exception as e:  # the Python guard still works; say why and do not fail set-up
            print(f"opclass: native guard not built ({type(e).__name__}: {e}); using the Python guard", file=sys.stderr)
            return 0
        # torch's extension loader rebuilds only when the source or flags changed.
        print(f"opclass: native guard {'up to date (nothing to rebuild)' if path == before and path.stat().st_mtime_ns == stamp else 'built'}: {path}")
        _native.load()
    print(f"opclass: guard {_native.guard_info()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
