"""What a kernel returns, made into what the dispatcher would return.

On the dispatcher path torch converts a Python kernel's result to the schema's return types (a
list becomes a tuple, NumPy scalars become Python numbers, a 0-dim Tensor becomes a number) or
raises. The fast path calls kernels itself, so it must do the same. Results that already have the
exact form pass a cheap check; anything else goes through a private companion op whose only kernel
returns the result, so torch's own conversion (and its errors) applies.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

import torch
from torch import _C

from ._alias import check_arity

_LIB: torch.library.Library | None = None
_COMPANIONS: dict[str, Any] = {}
_PENDING = threading.local()
_LOCK = threading.Lock()
_COUNTER = itertools.count()
_NS = "opclass_returns"
_CPU = _C.DispatchKeySet(_C.DispatchKey.CPU)
# exact_predicate's functions by return kinds, converters by return text: ops share a few return
# types, and compiling a predicate per op was the largest single cost of defining an op (a
# converter per op and kernel, a good part of the objects each op kept).
_PREDICATES: dict[tuple[str, ...], Callable[[Any], bool]] = {}
_CONVERTERS: dict[str, Callable[[str, Any], Any]] = {}


def _companion(returns: str) -> Any:
    """The op ``() -> returns`` whose CPU kernel hands back the pending result."""
    global _LIB
    with _LOCK:
        op = _COMPANIONS.get(returns)
        if op is None:
            if _LIB is None:
                _LIB = torch.library.Library(_NS, "FRAGMENT")
            name = f"r{next(_COUNTER)}"
            _LIB.define(f"{name}() -> {returns}")
            _LIB.impl(name, lambda: _PENDING.value, "CPU")
            op = getattr(getattr(torch.ops, _NS), name).default
            _COMPANIONS[returns] = op
    return op


def _return_text(schema: torch._C.FunctionSchema) -> str:
    text = str(schema)
    text = text[text.index(") -> ") + len(") -> ") :]
    # Alias annotations belong to the op, not to a companion without arguments.
    for alias in {r.alias_info for r in schema.returns if r.alias_info is not None}:
        for name in alias.before_set:
            text = text.replace(f"({name}!)", "").replace(f"({name})", "")
    return text


_EXACT = {
    "Tensor": "type({v}) is _T",
    "Optional[Tensor]": "({v} is None or type({v}) is _T)",
    "int": "(type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807)",
    "float": "type({v}) is float",
    "bool": "type({v}) is bool",
    "List[Tensor]": "(type({v}) is list and all(type(_e) is _T for _e in {v}))",
}


def exact_check(schema: torch._C.FunctionSchema, var: str) -> str | None:
    """A Python expression true when ``var`` already is what the dispatcher would return;
    ``None`` when no cheap expression exists (then every result is converted)."""
    return _exact_text(tuple(str(r.real_type) for r in schema.returns), var)


def _exact_text(kinds: tuple[str, ...], var: str) -> str | None:
    if not kinds:
        return f"{var} is None"
    if any(k not in _EXACT for k in kinds):
        return None
    if len(kinds) == 1:
        return _EXACT[kinds[0]].format(v=var)
    parts = [f"type({var}) is tuple", f"len({var}) == {len(kinds)}"]
    parts += [_EXACT[k].format(v=f"{var}[{i}]") for i, k in enumerate(kinds)]
    return " and ".join(parts)


def converter(schema: torch._C.FunctionSchema) -> Callable[[str, Any], Any]:
    """``convert(where, result)``: the dispatcher's conversion of a kernel result for this schema,
    for a result that failed the exact check. A result the op cannot return raises what torch
    raises (``RuntimeError``; ``TypeError`` where torch says "not a sequence"), with a message
    naming ``where`` (``"ns::op (Cls.cpu)"``), what came back, what the op returns and the fix.

    Stricter than the dispatcher in one way: ``None`` where the schema promises a value that is
    not optional (the dispatcher makes it an undefined Tensor, or ``False``) is refused, as the
    kernel most likely forgot its ``return``.
    """
    returns = _return_text(schema)
    convert = _CONVERTERS.get(returns)
    if convert is None:
        # A race makes an equal converter twice; either is right.
        convert = _CONVERTERS.setdefault(returns, _make_converter(returns, schema))
    return convert


def _make_converter(returns: str, schema: torch._C.FunctionSchema) -> Callable[[str, Any], Any]:
    """The converter of every op whose returns read ``returns``; of ``schema`` (the first such
    op's), only the returns are read."""
    if not schema.returns:

        def convert_none(where: str, result: Any) -> Any:
            if result is not None:
                raise RuntimeError(_explain(where, schema, result))
            return None

        return convert_none
    n_returns = len(schema.returns)
    required = tuple(i for i, r in enumerate(schema.returns) if not str(r.real_type).startswith("Optional["))

    def convert(where: str, result: Any) -> Any:
        if result is None and n_returns == 1 and required:
            raise RuntimeError(_explain(where, schema, result))
        check_arity(where, n_returns, result)
        if n_returns > 1 and isinstance(result, (tuple, list)) and len(result) == n_returns and any(result[i] is None for i in required):
            raise RuntimeError(_explain(where, schema, result))
        op = _companion(returns)
        _PENDING.value = result
        try:
            return op.redispatch(_CPU)
        except (RuntimeError, TypeError) as e:
            error = RuntimeError if isinstance(e, RuntimeError) else TypeError
        finally:
            _PENDING.value = None
        # Outside the except block: torch's own message ("Unable to cast ... to C++ type '?'")
        # says less than ours, so it is not chained.
        raise error(_explain(where, schema, result))

    return convert


def accepts(kind: str, value: Any) -> bool:
    """Whether the dispatcher converts ``value`` to the schema type ``kind`` (``"Tensor?"``);
    ``True`` where it cannot tell (a type with no schema spelling): never a false accusation."""
    try:
        op = _companion(kind)
    except RuntimeError:
        return True
    _PENDING.value = value
    try:
        op.redispatch(_CPU)
        return True
    except (RuntimeError, TypeError):
        return False
    finally:
        _PENDING.value = None


def _explain(where: str, schema: torch._C.FunctionSchema, result: Any) -> str:
    from ._result_errors import explain  # only once a result has failed

    return explain(where, schema, result, accepts)


def exact_predicate(schema: torch._C.FunctionSchema) -> Callable[[Any], bool]:
    """``is_exact(result)``: :func:`exact_check` as a function (never true without an expression)."""
    kinds = tuple(str(r.real_type) for r in schema.returns)
    predicate = _PREDICATES.get(kinds)
    if predicate is None:
        text = _exact_text(kinds, "out")
        predicate = eval(f"lambda out: {text or 'False'}", {"_T": torch.Tensor})  # noqa: S307
        # A race writes an equal function twice; either is right.
        predicate = _PREDICATES.setdefault(kinds, predicate)
    return predicate
