"""Shared by the tests of error messages: the exception a call raises, its first line, and a
compiled graph calling an op (whose errors come at its run time)."""

from __future__ import annotations

from typing import Any, Callable

import torch


def error_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> BaseException:
    """The exception ``fn(*args, **kwargs)`` raises (failing the test if it raises none)."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception is the subject
        return e
    raise AssertionError(f"{fn} raised nothing")


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0]


def compiled_call(op: Any) -> Callable[..., Any]:
    """``op(*args)`` compiled with ``backend="aot_eager", fullgraph=True``."""
    return torch.compile(lambda *args: op(*args), backend="aot_eager", fullgraph=True)
