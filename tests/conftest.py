"""Shared fixtures: every test gets its own op namespace, removed afterwards."""

from __future__ import annotations

import itertools
import logging
from typing import Iterator

import pytest
import torch

import opclass

_COUNTER = itertools.count()

# Deprecations fail the test that causes them (torch renames APIs between releases, and a user
# should see none of its notices because of opclass): warnings raised from opclass's code on every
# torch; on torch 2.14 and later every one (releases before warn from inside themselves, e.g.
# 2.13's torch.export deep-copying a pytree LeafSpec); and the notices torch logs instead of
# warning (2.14's opaque-type renames), on every torch.
_NEWEST = torch.torch_version.TorchVersion(torch.__version__) >= (2, 14)
_DEPRECATIONS_AS_ERRORS = (
    "error::DeprecationWarning:opclass",
    "error::FutureWarning:opclass",
    *(
        (
            "error::DeprecationWarning",
            "error::FutureWarning",
            # torch 2.15's gradcheck(check_forward_ad=True) calls torch.jit.script itself.
            "ignore:`torch.jit.script` is deprecated:FutureWarning",
        )
        if _NEWEST
        else ()
    ),
)


class _LoggedDeprecations(logging.Handler):
    """Collects the deprecation notices torch logs (``log.warning("... is deprecated ...")``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "deprecated" in message.lower():
            self.seen.append(f"{record.name}: {message}")


_LOGGED = _LoggedDeprecations()


def pytest_configure(config: pytest.Config) -> None:
    for line in _DEPRECATIONS_AS_ERRORS:
        config.addinivalue_line("filterwarnings", line)
    logging.getLogger("torch").addHandler(_LOGGED)


@pytest.fixture(autouse=True)
def _no_logged_deprecation() -> Iterator[None]:
    """Fails a test during which torch logged a deprecation notice."""
    del _LOGGED.seen[:]
    yield
    if _LOGGED.seen:
        pytest.fail("torch logged a deprecation notice during the test:\n" + "\n".join(_LOGGED.seen), pytrace=False)


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
