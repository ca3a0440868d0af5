"""Errors raised by opclass, and the helpers that make their messages quote the user's code."""

from __future__ import annotations

import difflib
import dis
import inspect
import os
import re
from typing import Any, Iterable, NoReturn

__all__ = ["OpDefinitionError"]


class OpDefinitionError(TypeError):
    """A ``CustomOp`` subclass is defined wrongly; raised while the class statement runs.

    The message names the class, the hook (with the user's signature), the problem and the fix::

        Bad.abstarct(x: Tensor) -> Tensor: not a hook; did you mean 'abstract'?

    Attributes ``cls_name``, ``hook``, ``problem`` and ``fix`` hold the parts.

    Example:
        >>> import opclass, torch
        >>> try:
        ...     class Bad(opclass.CustomOp, name="docs_errors::bad"):
        ...         @staticmethod
        ...         def cpu(x):  # no annotations and no schema=
        ...             return x
        ... except opclass.OpDefinitionError as e:
        ...     print(e.hook)
        cpu
    """

    def __init__(self, cls_name: str, hook: str | None, where: str, problem: str, fix: str = "") -> None:
        self.cls_name = cls_name
        self.hook = hook
        self.problem = problem
        self.fix = fix
        message = f"{where}: {problem}"
        if fix:
            message += f"; {fix}"
        super().__init__(message)


def format_annotation(annotation: Any) -> str:
    """Write an annotation the way a user would have typed it (``Tensor``, not ``torch.Tensor``)."""
    if isinstance(annotation, str):
        return annotation
    text = inspect.formatannotation(annotation).replace("torch.Tensor", "Tensor").replace("typing.", "")
    # opclass's own marks as the user writes them (SchemaType's repr is SchemaType('...')).
    text = text.replace("Annotated[int, SchemaType('int')]", "opclass.Int")
    return re.sub(r"(?<![\w.])SchemaType\(", "opclass.SchemaType(", text)


class _Text:
    """An annotation shown as its text: ``inspect`` prints ``repr`` of non-type annotations."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def format_signature(fn: Any) -> str:
    """``(x: Tensor, n: int = 2) -> Tensor`` for ``fn``, or ``(...)`` if it has none."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "(...)"
    params = [
        p if p.annotation is p.empty else p.replace(annotation=_Text(format_annotation(p.annotation)))
        for p in sig.parameters.values()
    ]
    ret = sig.return_annotation
    if ret is not sig.empty:
        ret = _Text(format_annotation(ret))
    return str(sig.replace(parameters=params, return_annotation=ret))


def formatdef(cls_name: str, hook: str, fn: Any) -> str:
    """``Cls.hook(x: Tensor) -> Tensor``: where an error points in the user's class."""
    return f"{cls_name}.{hook}{format_signature(fn)}"


def definition_error(cls_name: str, hook: str | None, value: Any, problem: str, fix: str = "") -> OpDefinitionError:
    """The error for ``cls_name.hook`` (the class itself for no hook), quoting ``value``'s
    signature where it is a function."""
    where = formatdef(cls_name, hook, value) if hook and callable(value) else f"{cls_name}.{hook}" if hook else f"class {cls_name}"
    return OpDefinitionError(cls_name, hook, where, problem, fix)


def did_you_mean(name: str, candidates: Iterable[str], aliases: dict[str, str] | None = None) -> str | None:
    """The candidate ``name`` most likely misspells, if any (case slips, aliases, near misses)."""
    candidates = list(candidates)
    if aliases and name.lower() in aliases and aliases[name.lower()] in candidates:
        return aliases[name.lower()]
    lowered = {c.lower(): c for c in candidates}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


def first_line(e: BaseException) -> str:
    """``"ValueError: <first line of its message>"``: another error, quoted inside one of ours."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def raised_by_torch(e: BaseException) -> bool:
    """``e`` comes from torch (a C function, or torch's Python code), not from a ``raise`` of the
    user's: the innermost frame of its traceback is torch's, or is not at a ``raise``."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return True
    code = tb.tb_frame.f_code
    if f"{os.sep}torch{os.sep}" in code.co_filename:
        return True
    return dis.opname[code.co_code[tb.tb_lasti]] != "RAISE_VARARGS"


def named(e: BaseException, where: str, fix: str = "") -> BaseException:
    """``e`` of the same type with ``where`` (the op and the hook) and the ``fix`` on its first
    line, for a torch error raised inside a hook (``raise named(e, ...) from e``); ``e`` itself
    where its type cannot be made from a message, or it names ``where`` already."""
    text = str(e)
    if text.startswith(where):
        return e
    first, _, rest = text.partition("\n")
    try:
        new = type(e)(f"{where}: " + (f"{first.rstrip('.')}; {fix}" if fix else first) + (f"\n{rest}" if rest else ""))
    except Exception:  # noqa: BLE001 - an exception type with a constructor of its own
        return e
    return new.with_traceback(e.__traceback__)


def reraise(e: BaseException, where: str, fix: str = "") -> NoReturn:
    """Raise :func:`named` ``(e, where, fix)``, chained to ``e`` (``e`` itself where it cannot be named)."""
    new = named(e, where, fix)
    if new is e:
        raise e
    raise new from e
