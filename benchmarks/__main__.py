"""``python -m benchmarks``: the per-call overhead tables of :mod:`benchmarks.benchmark`."""

from __future__ import annotations

import sys

from .benchmark import main

if __name__ == "__main__":
    sys.exit(main())
