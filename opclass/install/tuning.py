"""Tuning tables: which provider of an op a call runs, per *bucket* of its arguments (the dtype of
its first floating Tensor, and the size class of its largest Tensor), as measured by
``opclass.tune_providers`` on one device, torch and source of every kernel; saved as JSON, read
back (``opclass.load_tuning``, ``OPCLASS_TUNING``), and refused where any of those differs.
:class:`opclass.install.table.Choice` puts a table's choices in front of the op's candidates.

Example:
    >>> import torch
    >>> from opclass.install.tuning import bucket_text
    >>> bucket_text((torch.float16, 2))
    '(float16, 2)'
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import platform
import types
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import torch

if TYPE_CHECKING:
    from opclass.define.arguments import Arguments

__all__ = ["explained", "in_front", "native_test", "Tuning", "Bucket", "bucket_function", "bucket_text", "midpoints", "source_hash", "device_name", "refusal", "read"]

#: A call's bucket: the dtype of its first floating Tensor argument (else its first Tensor's),
#: and the size class of its largest Tensor argument.
Bucket = tuple[torch.dtype, int]
#: The file format's version (a file of another version is refused, not misread).
FORMAT = 1


@dataclasses.dataclass(frozen=True, eq=False)
class Tuning:
    """One op's tuning table, as ``opclass.tune_providers`` measured it: where (``device``, the
    name of a ``device_type`` device; ``torch``), on which kernels (``hashes``: each kernel's
    :func:`source_hash`), the size boundaries, the provider each bucket runs (``choices``), how
    much the rounds of measurement differed (``spread``: per provider, the largest max/min - 1 of
    its medians across rounds, in %), and ``order``: every provider, fastest first (an order for
    ``opclass.set_provider_order``). Equal only to itself (it keys the op's choice).

    Example:
        >>> import torch
        >>> t = Tuning("mylib::op", "x86_64", "cpu", "2.13.0", {"a": "0"}, (4096,), {(torch.float32, 0): "a"}, {"a": 1.5}, ("a",))
        >>> t.choices[(torch.float32, 0)], t.sizes
        ('a', (4096,))
    """

    op: str
    device: str
    device_type: str
    torch: str
    hashes: Mapping[str, str]
    sizes: tuple[int, ...]
    choices: Mapping[Bucket, str]
    spread: Mapping[str, float]
    order: tuple[str, ...]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this table into the JSON file ``path`` (created if absent): the file keeps the
        other ops' tables it holds, and this op's is replaced. ``opclass.load_tuning(path)`` or
        ``OPCLASS_TUNING=path`` reads them back. Example: in ``opclass.load_tuning``."""
        target = Path(path)
        tables = _tables(target) if target.exists() else {}
        tables[self.op] = {
            "device": self.device, "device_type": self.device_type, "torch": self.torch, "hashes": dict(self.hashes), "sizes": list(self.sizes),
            "choices": [[_dtype_name(d), n, name] for (d, n), name in self.choices.items()], "spread": dict(self.spread), "order": list(self.order),
        }
        temporary = target.with_name(f".{target.name}.{os.getpid()}")  # readers never see half a file
        temporary.write_text(json.dumps({"opclass_tuning": FORMAT, "tables": tables}, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, target)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def bucket_text(bucket: Bucket) -> str:
    """``(float16, 2)``: a bucket as explanations and tables show it. Example: in the module docstring."""
    return f"({_dtype_name(bucket[0])}, {bucket[1]})"


def midpoints(numels: Iterable[int]) -> tuple[int, ...]:
    """Boundaries between the distinct ``numels``: their geometric midpoints (each above the smaller
    numel, at most the larger), so each numel gets a size class of its own.

    Example:
        >>> midpoints([16, 1024, 16, 1 << 20])
        (128, 32768)
    """
    distinct = sorted(set(numels))
    return tuple(max(a + 1, math.ceil(math.sqrt(a * b))) for a, b in zip(distinct, distinct[1:]))


def bucket_function(sizes: Sequence[int], arguments: Arguments, within: frozenset[Bucket] | None = None) -> Callable[..., Any]:
    """``bucket(*args, **kwargs)``: the bucket of a call of an op with these arguments, called as
    predicates are (positional arguments by place, defaults filled in; keyword-only ones by name);
    ``None`` for a call without Tensors. With ``within``: whether the bucket is one of those, the
    predicate a table's choice runs where the C entry does not test it (:func:`native_test`).

    Example:
        >>> import torch, opclass
        >>> class DocsBucket(opclass.CustomOp, name="docs_bucket::neg"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return -x
        >>> bucket_function((8,), DocsBucket.record.arguments)(torch.ones(3, 3, dtype=torch.float16))
        (torch.float16, 1)
        >>> bucket_function((8,), DocsBucket.record.arguments, frozenset({(torch.float32, 0)}))(torch.ones(3, 3))
        False
        >>> opclass.remove(DocsBucket)
    """
    bounds = tuple(sorted(sizes))

    def bucket(*args: Any, **kwargs: Any) -> Bucket | None:
        found = list(arguments.tensors(args, kwargs))
        if not found:
            return None
        first = next((t for t in found if t.is_floating_point()), found[0])
        return first.dtype, bisect.bisect_right(bounds, max(t.numel() for t in found))

    return bucket if within is None else lambda *args, **kwargs: bucket(*args, **kwargs) in within


def explained(tuned: Tuning, bucket: Bucket | None, chosen: str) -> tuple[str | None, dict[str, str]]:
    """How ``explain_providers`` says a table took part in a call of ``bucket`` that ran
    ``chosen``: the chosen one's note (``None``: the table had no say) and, by name, the other
    providers the table names."""
    picked = None if bucket is None else tuned.choices.get(bucket)
    notes = {name: "the tuning table chooses another for this bucket" for name in tuned.choices.values() if picked is not None}
    if picked is not None and picked != chosen:
        notes[picked] = "supports() returned False"  # the table's choice declines the call
    if bucket is None:
        return None, notes
    if picked is None:
        return f"runs (bucket {bucket_text(bucket)} is not in the tuning table)", notes
    return (f"runs (tuning table: bucket {bucket_text(bucket)} → {picked})" if picked == chosen else None), notes


def in_front(tuned: Tuning, candidates: Sequence[Any], arguments: Arguments) -> tuple[list[Any], dict[int, Any]]:
    """What a table puts in front of a choice's candidates (entries of the kernel table): for
    each provider it chooses, in the candidates' order, a copy of its entry whose predicate is "the
    call's bucket is one the table gives it, and its own ``supports`` accepts the call", so every
    route runs it as any candidate; and, by place, those predicates as the C entry tests them
    itself (:func:`native_test`)."""
    front: list[Any] = []
    tests: dict[int, Any] = {}
    for e in candidates:
        mine = frozenset(b for b, name in tuned.choices.items() if name == e.name)
        if not mine:
            continue
        within, supports = bucket_function(tuned.sizes, arguments, mine), e.options.supports
        both = within if supports is None else (lambda w, s: lambda *a, **k: w(*a, **k) and s(*a, **k))(within, supports)
        test = native_test(tuned.sizes, arguments, mine) if supports is None else None
        if test is not None:
            tests[len(front)] = test
        front.append(dataclasses.replace(e, options=dataclasses.replace(e.options, supports=both)))
    return front, tests


def native_test(sizes: Sequence[int], arguments: Arguments, within: frozenset[Bucket]) -> tuple[tuple[int, ...], dict[torch.dtype, tuple[int, int]]] | None:
    """What the C entry tests instead of calling ``bucket_function(sizes, arguments, within)``:
    ``(places, {dtype: (low, high)})``, the call's bucket (the dtype of the first floating Tensor
    at ``places``, else of the first; the largest numel) in ``within`` where that numel is in
    ``[low, high)`` for that dtype; ``None`` where that form does not apply (a Tensor argument that
    is optional, a list or keyword-only, or a dtype's size classes that are not contiguous)."""
    holding = [a for a in arguments if a.holds_tensor]
    spans = _spans(tuple(sorted(sizes)), within)
    if spans is None or not holding or any(a.jit != "Tensor" or a.keyword_only for a in holding):
        return None
    return tuple(a.index for a in holding), {d: (int(low), int(min(high, _NUMEL_MAX))) for d, (low, high) in spans.items()}


_NUMEL_MAX = 2**63 - 1


def _spans(bounds: tuple[int, ...], within: frozenset[Bucket]) -> dict[torch.dtype, tuple[float, float]] | None:
    """Per dtype, the numels ``[low, high)`` of its size classes in ``within``, where they are contiguous (else ``None``)."""
    spans: dict[torch.dtype, tuple[float, float]] = {}
    for dtype in {d for d, _ in within}:
        classes = sorted(c for d, c in within if d == dtype)
        if classes != list(range(classes[0], classes[-1] + 1)):
            return None
        spans[dtype] = (bounds[classes[0] - 1] if classes[0] else 0, bounds[classes[-1]] if classes[-1] < len(bounds) else math.inf)
    return spans


_HASHES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def source_hash(fn: Callable[..., Any]) -> str:
    """The sha256 of ``fn``'s source (``inspect.getsource``; where there is none, a function made
    by ``exec`` or in a REPL: its code, names and constants), hex: whether a kernel changed since
    it was measured (a lambda's source is its whole line). A ``functools.partial`` hashes its
    function and its arguments.

    Example:
        >>> one = lambda x: x + 1
        >>> two = lambda x: x + 2
        >>> source_hash(one) == source_hash(two), len(source_hash(one))
        (False, 64)
    """
    try:
        return _HASHES[fn]
    except (KeyError, TypeError):  # TypeError: not weakly referable
        pass
    if isinstance(fn, functools.partial):
        found = hashlib.sha256(f"{source_hash(fn.func)}{fn.args!r}{sorted(fn.keywords.items())!r}".encode()).hexdigest()
    else:
        try:
            text = inspect.getsource(fn).encode()
        except (OSError, TypeError):
            code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)
            # No code (a builtin, a C extension's function): what it is called.
            text = _code_bytes(code) if code is not None else f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}".encode()
        found = hashlib.sha256(text).hexdigest()
    try:
        _HASHES[fn] = found
    except TypeError:
        pass
    return found


def _code_bytes(code: types.CodeType) -> bytes:
    """What a code object does, the same in every process (no addresses, no set order)."""

    def const(c: Any) -> bytes:
        if isinstance(c, types.CodeType):
            return _code_bytes(c)
        if isinstance(c, frozenset):
            return repr(sorted(map(repr, c))).encode()
        return repr(c).encode()

    return b"|".join([code.co_code, repr(code.co_names).encode(), *map(const, code.co_consts)])


@functools.cache
def device_name(device_type: str) -> str:
    """The name of this machine's ``device_type`` device, as tables record where they were tuned:
    the accelerator's (``torch.cuda.get_device_name()``), else the processor's
    (``platform.processor()`` or ``platform.machine()``).

    Example:
        >>> device_name("cpu") != ""
        True
    """
    module = getattr(torch, device_type, None)
    if getattr(module, "get_device_name", None) is not None:
        return str(module.get_device_name()) if module.is_available() else f"no {device_type} device"  # type: ignore[union-attr]
    return platform.processor() or platform.machine()


def refusal(tuned: Tuning, kernels: Mapping[str, Callable[..., Any]] | None) -> str | None:
    """Why ``tuned`` does not apply to the op whose kernels (name -> the user's function) these
    are, here (``None``: it applies): another device or torch, a kernel that changed since, a
    provider the op lacks (``kernels`` ``None``: the op is not defined yet, only the first two).

    Example:
        >>> import torch
        >>> kernel = lambda x: x
        >>> t = Tuning("mylib::op", "a machine of 1990", "cpu", torch.__version__, {"k": source_hash(kernel)}, (), {}, {}, ("k",))
        >>> refusal(t, {"k": kernel}).startswith("tuned on a machine of 1990, this is ")
        True
    """
    here = device_name(tuned.device_type)
    if tuned.device != here:
        return f"tuned on {tuned.device}, this is {here}"
    if tuned.torch != torch.__version__:
        return f"tuned with torch {tuned.torch}, this is torch {torch.__version__}"
    if kernels is None:
        return None
    for name in [*tuned.hashes, *tuned.choices.values()]:
        if name not in kernels:
            return f"it names provider {name!r}, which {tuned.op} does not have (it has {', '.join(kernels)})"
        now = source_hash(kernels[name])
        if tuned.hashes.get(name) != now:
            return f"provider {name!r} changed since tuning (source hash {tuned.hashes.get(name, '?')[:12]}, now {now[:12]})"
    return None


def _tables(path: Path) -> dict[str, Any]:
    def wrong(what: str) -> ValueError:
        return ValueError(f"{path} is no opclass tuning file ({what}): write it with opclass.tune_providers(Op, samples).save(path)")

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read the tuning file {path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
        raise wrong("no 'tables'")
    if data.get("opclass_tuning") != FORMAT:
        raise wrong(f"format {data.get('opclass_tuning')!r}, this opclass reads {FORMAT}")
    tables: dict[str, Any] = data["tables"]
    return tables


def read(path: str | os.PathLike[str]) -> list[Tuning]:
    """The tables of the file ``path`` (:meth:`Tuning.save` writes it); a ``ValueError`` names what
    is wrong with it.

    Example:
        >>> read("no/such/file.json")
        Traceback (most recent call last):
        ...
        ValueError: cannot read the tuning file no/such/file.json: [Errno 2] No such file or directory: 'no/such/file.json'
    """
    found = []
    for op, t in _tables(Path(path)).items():
        try:
            dtypes = {name: getattr(torch, name) for name, _, _ in t["choices"]}
            if not all(isinstance(d, torch.dtype) for d in dtypes.values()):
                raise ValueError(f"a choice names no dtype: {sorted(dtypes)}")
            choices = {(dtypes[name], int(n)): str(p) for name, n, p in t["choices"]}
            found.append(
                Tuning(
                    op, str(t["device"]), str(t["device_type"]), str(t["torch"]), {str(k): str(v) for k, v in t["hashes"].items()}, tuple(int(s) for s in t["sizes"]),
                    choices, {str(k): float(v) for k, v in t["spread"].items()}, tuple(str(n) for n in t["order"]),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{path}: the table of {op} is malformed ({type(e).__name__}: {e}); tune it again") from None
    return found
