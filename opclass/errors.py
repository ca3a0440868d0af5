"""Errors raised by opclass, and the helpers that make their messages quote the user's code."""

from __future__ import annotations

import difflib
import dis
import inspect
import os
import re
import sys
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
        self.cls_name, self.hook, self.problem, self.fix = cls_name, hook, problem, fix
        super().__init__(f"{where}: {problem}" + (f"; {fix}" if fix else ""))


def format_annotation(annotation: Any) -> str:
    """Write an annotation the way a user would have typed it (``Tensor``, not ``torch.Tensor``)."""
    if isinstance(annotation, str):
        return annotation
    text = inspect.formatannotation(annotation).replace("torch.Tensor", "Tensor").replace("typing.", "")
    # opclass's own marks as the user writes them (SchemaType's repr is SchemaType('...')).
    text = text.replace("Annotated[int, SchemaType('int')]", "opclass.Int")
    return re.sub(r"(?<![\w.])SchemaType\(", "opclass.SchemaType(", text)


class _Text(str):
    """An annotation shown as its text: ``inspect`` prints ``repr`` of non-type annotations."""

    __repr__ = str.__str__


def formatdef(cls_name: str, hook: str, fn: Any) -> str:
    """``Cls.hook(x: Tensor) -> Tensor``: where an error points in the user's class (``Cls.hook(...)``
    for a ``fn`` with no signature)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{cls_name}.{hook}(...)"
    params = [p if p.annotation is p.empty else p.replace(annotation=_Text(format_annotation(p.annotation))) for p in sig.parameters.values()]
    ret = sig.return_annotation if sig.return_annotation is sig.empty else _Text(format_annotation(sig.return_annotation))
    return f"{cls_name}.{hook}{sig.replace(parameters=params, return_annotation=ret)}"


def definition_error(cls_name: str, hook: str | None, value: Any, problem: str, fix: str = "") -> OpDefinitionError:
    """The error for ``cls_name.hook`` (the class itself for no hook), quoting ``value``'s
    signature where it is a function."""
    where = formatdef(cls_name, hook, value) if hook and callable(value) else f"{cls_name}.{hook}" if hook else f"class {cls_name}"
    return OpDefinitionError(cls_name, hook, where, problem, fix)


def did_you_mean(name: str, candidates: Iterable[str], aliases: dict[str, str] | None = None) -> str | None:
    """The candidate ``name`` most likely misspells, if any (case slips, aliases, near misses)."""
    candidates = list(candidates)
    key, lowered = name.lower(), {c.lower(): c for c in candidates}
    if aliases and aliases.get(key) in candidates:
        return aliases[key]
    close = [key] if key in lowered else difflib.get_close_matches(key, list(lowered), n=1, cutoff=0.75)
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
    return f"{os.sep}torch{os.sep}" in code.co_filename or dis.opname[code.co_code[tb.tb_lasti]] != "RAISE_VARARGS"


def reraise(e: BaseException, where: str, fix: str = "") -> NoReturn:
    """Raise ``e`` (a torch error raised inside a hook) as the same type with ``where`` (the op and
    the hook) and the ``fix`` on its first line, chained to ``e``; ``e`` itself where its type
    cannot be made from a message, or it names ``where`` already."""
    text = str(e)
    first, _, rest = text.partition("\n")
    try:
        new = None if text.startswith(where) else type(e)(f"{where}: " + (f"{first.rstrip('.')}; {fix}" if fix else first) + (f"\n{rest}" if rest else ""))
    except Exception:  # noqa: BLE001 - an exception type with a constructor of its own
        new = None
    if new is None:
        raise e
    raise new.with_traceback(e.__traceback__) from e


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside opclass (the class statement)."""
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
