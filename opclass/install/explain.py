"""A kernel result the op cannot return, said in words.

Only runs once a result has failed (torch's own conversion refused it, or opclass's ``None``
rule did): it names the op and the hook, describes what came back and what the return type
promises, and suggests the fix. Every call path raises with this text, so the class call, the
generated call, the C entry and ``torch.ops`` agree.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from opclass.core.types import BY_SCHEMA, element_of, items_of, optional_of, returns_of

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

_WANT = {"Tensor": "a Tensor", "float": "a float", "int": "an int", "bool": "a bool", "Number": "a number", "str": "a str"}
_NUMBERS = (bool, int, float, complex)


def _schema_type(jit: str) -> str:
    """``Optional[List[Tensor]]`` (a JIT type) as schema text (``Tensor[]?``)."""
    optional, element = optional_of(jit), element_of(jit)
    if optional is not None:
        return _schema_type(optional) + "?"
    if element is not None:
        return _schema_type(element) + "[]"
    return "Scalar" if jit == "number" else jit


def python_type(kind: str) -> str:
    """``Tensor?[]`` -> ``list[Optional[Tensor]]``: a schema type as a Python annotation."""
    if kind.endswith("?"):
        return f"Optional[{python_type(kind[:-1])}]"
    if kind.endswith("[]"):
        return f"list[{python_type(kind[:-2])}]"
    # A JIT type with no schema spelling (the 1-tuple of -> tuple[Tensor]) is spelled item by item.
    items = items_of(kind)
    if items is not None:
        return f"tuple[{', '.join(python_type(_schema_type(i)) for i in items)}]"
    row = BY_SCHEMA.get(kind)
    return row.shown if row is not None else kind


def annotation(kinds: list[str]) -> str:
    """``-> tuple[Tensor, float]``: what the return annotation of the kernels says (or would)."""
    if not kinds:
        return "-> None"
    if len(kinds) == 1:
        return f"-> {python_type(kinds[0])}"
    return f"-> tuple[{', '.join(python_type(k) for k in kinds)}]"


def _want(kind: str) -> str:
    if kind.endswith("?"):
        return f"{_want(kind[:-1])} or None"
    if kind.endswith("[]"):
        inner = python_type(kind[:-2])
        return f"a list of {inner}s" if inner.isidentifier() else f"a list ({python_type(kind)})"
    return _WANT.get(python_type(kind), f"a {python_type(kind)}")


def _numpy_kind(value: Any) -> str | None:
    """``"array"`` / ``"scalar"`` for NumPy values (NumPy is never imported here)."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    return "array" if isinstance(value, np.ndarray) else "scalar" if isinstance(value, np.generic) else None


def describe_value(value: Any) -> str:
    """``a tuple (Tensor, Tensor)``, ``the float 3.0``, ``a NumPy array (float64, shape (3,))``..."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a {type(value).__name__} of shape {tuple(value.shape)}"
    np_kind = _numpy_kind(value)
    if np_kind == "array":
        return f"a NumPy array ({value.dtype}, shape {value.shape})"
    if np_kind == "scalar":
        return f"a NumPy {type(value).__name__} ({value})"
    if isinstance(value, _NUMBERS) or isinstance(value, str):
        text = repr(value)
        return f"the {type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"
    if isinstance(value, (tuple, list)):
        if not value:
            return f"an empty {type(value).__name__}"
        shown = ("None" if v is None else "Tensor" if isinstance(v, torch.Tensor) else type(v).__name__ for v in value[:6])
        items = ", ".join(shown) + (", ..." if len(value) > 6 else "")
        return f"a {type(value).__name__} ({items})"
    kind = type(value)
    return f"a {kind.__qualname__}" if kind.__module__ == "builtins" else f"a {kind.__module__}.{kind.__qualname__}"


def _fix(kind: str, value: Any, single: bool) -> str:
    """The fix for ``value`` where ``kind`` is promised (``single``: it is the op's only output)."""
    base = kind.rstrip("?")
    np_kind = _numpy_kind(value)
    if value is None:
        forgot = "did the kernel forget to return its result?"
        return forgot + " (If None is meant, annotate Optional[Tensor].)" if base == "Tensor" else forgot
    if base == "Tensor":
        if np_kind is not None:
            return f"convert it with {'torch.from_numpy' if np_kind == 'array' else 'torch.tensor'}(...)"
        if isinstance(value, _NUMBERS):
            return f"return a Tensor (torch.tensor({value!r})), or annotate the kernels -> {type(value).__name__} if the op returns a number"
        if isinstance(value, (tuple, list)) and single and all(isinstance(v, torch.Tensor) for v in value):
            if len(value) == 1:
                return f"return the Tensor itself, not a 1-element {type(value).__name__}"
            return f"return one Tensor, or declare {len(value)} outputs: -> tuple[{', '.join(['Tensor'] * len(value))}]"
        return "return a torch.Tensor"
    if base.endswith("[]"):
        if isinstance(value, torch.Tensor):
            return "return a list of Tensors ([t] for one), or annotate the kernels -> Tensor"
        return f"return {_want(base)}"
    if base in ("float", "int", "SymInt", "bool", "Scalar"):
        py = python_type(base)
        if isinstance(value, torch.Tensor) or np_kind == "array":
            return f"return a Python {py if py != 'Number' else 'number'} (t.item() of a one-element Tensor or array), or annotate the kernels -> Tensor"
        return f"return {_want(base)}"
    return f"return {_want(kind)}"


def _misfit(kind: str, value: Any, path: str, accepts: Callable[[str, Any], bool]) -> tuple[str, str, Any] | None:
    """``(path, kind, value)`` of the first part of ``value`` that cannot be ``kind``; ``None`` if none."""
    if value is None:
        return None if kind.endswith("?") else (path, kind, value)
    base = kind[:-1] if kind.endswith("?") else kind
    if base.endswith("[]") and isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found = _misfit(base[:-2], item, f"{path}[{i}]", accepts)
            if found is not None:
                return found
    return None if accepts(kind, value) else (path, kind, value)


def explain(where: str, schema: torch._C.FunctionSchema, result: Any, accepts: Callable[[str, Any], bool]) -> str:
    """Why ``result`` cannot be what the op returns, and the fix. ``accepts(kind, value)``:
    whether the dispatcher converts ``value`` to the schema type ``kind``."""
    kinds = [_schema_type(r) for r in returns_of(schema)]  # schema text: Tensor, Tensor?, float[]
    promised = annotation(kinds)
    if not kinds:
        return (
            f"{where} returned {describe_value(result)}, but the op returns nothing ({promised}): drop the return value "
            "(a kernel of a mutating op writes its inputs in place and returns None), or declare the output (e.g. -> Tensor)"
        )
    if len(kinds) == 1:
        found = _misfit(kinds[0], result, "", accepts)
    elif not isinstance(result, (tuple, list)):
        fix = f"return a tuple of {len(kinds)} values (return a, b{', ...' if len(kinds) > 2 else ''})"
        if isinstance(result, torch.Tensor):
            fix += ", or declare one output (-> Tensor)"
        return f"{where} returned {describe_value(result)}, but the op returns {len(kinds)} values ({promised}): {fix}"
    else:
        found = next((f for i, (k, v) in enumerate(zip(kinds, result)) if (f := _misfit(k, v, f"[{i}]", accepts)) is not None), None)
    if found is None:
        return f"{where} returned {describe_value(result)}, which the dispatcher cannot convert to {promised}: return a value of that type"
    path, kind, value = found
    fix = _fix(kind, value, single=len(kinds) == 1 and not path)
    if not path:
        return f"{where} returned {describe_value(value)}, but the op returns {_want(kind)} ({promised}): {fix}"
    return f"{where} returned {describe_value(result)} whose item {path} is {describe_value(value)}, but {_want(kind)} belongs there ({promised}): {fix}"


def describe_call(record: OpRecord, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``x: Tensor(float16, [4, 64], cuda:0), eps: 1e-06``: a call's arguments (defaults filled
    in, so every route says the same), metadata only."""

    def show(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"Tensor({str(v.dtype).removeprefix('torch.')}, {list(v.shape)}, {v.device}{'' if v.is_contiguous() else ', not contiguous'})"
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(show(e) for e in v) + "]"
        return repr(v)

    values = record.arguments.values(*record.arguments.complete(args, kwargs))
    return ", ".join(f"{a.name}: {show(v)}" for a, v in zip(record.arguments, values))
