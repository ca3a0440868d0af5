"""Shared fixtures: every test gets its own op namespace, removed afterwards."""

from __future__ import annotations

import itertools
from typing import Iterator

import pytest

import opclass

_COUNTER = itertools.count()


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace such as ``t_test_name_3``; every op defined in it is removed after the test."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40]
    namespace = f"t_{name}_{next(_COUNTER)}"
    yield namespace
    opclass.remove_namespace(namespace)
