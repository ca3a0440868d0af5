"""Shared by the tests that compare an op's call paths: every call path of an op agrees."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from torch import Tensor
from torch.utils._pytree import tree_map_only

from opclass._harness import call_paths, diff, observe


def assert_paths_agree(op: Any, make: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]], context: Any = None) -> dict[str, Any]:
    """Every path of :func:`opclass._harness.call_paths` observes the same as ``op.op``, each on
    the inputs ``make()`` builds for it (inside ``context()`` if given); the observations by label."""
    seen = {}
    for label, fn in call_paths(op).items():
        with context() if context is not None else contextlib.nullcontext():
            seen[label] = observe(fn, *make())
    *fast, reference = seen
    for label in fast:
        d = diff(seen[label], seen[reference])
        assert d is None, f"{label} differs from {reference} at {d}"
    return seen


def assert_paths_agree_on(op: Any, *args: Any) -> dict[str, Any]:
    """:func:`assert_paths_agree` on positional ``args``, each path getting its own copies of them
    (Tensors in lists included); the dispatcher's observation."""

    def fresh() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return tuple(tree_map_only(Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), args)), {}

    return list(assert_paths_agree(op, fresh).values())[-1]
