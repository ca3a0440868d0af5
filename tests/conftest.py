"""Shared fixtures: every test gets its own op namespace, removed afterwards."""

from __future__ import annotations

import itertools
from typing import Iterator

import pytest

import opclass

_COUNTER = itertools.count()


@pytest.fixture(scope="session", autouse=True)
def _records_from_the_start() -> None:
    """Under the pure-Python guard, finish its self-test before any test, so that calls record
    plain argument sets from the first one (a test's calls would otherwise run the exact check
    while the self-test runs on its thread, and the recorded checks would go untested)."""
    from opclass.callpath import pyguard as _pyguard

    _pyguard.factory(wait=True)


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace such as ``t_test_name_3``; every op defined in it is removed after the test."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)[:40]
    namespace = f"t_{name}_{next(_COUNTER)}"
    yield namespace
    opclass.remove_namespace(namespace)
