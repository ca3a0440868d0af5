"""The output contract, written once: what a kernel's result must be, and what it becomes.

Every path that runs a kernel (the checked kernels the dispatcher calls, the Autograd kernel's
shortcut, the fast path's Functions, the generated call, the C entry) ends alike: a cheap test
that the result is final (one fresh Tensor: :func:`output_is_fresh`, :data:`INLINE_TEST` in
generated code), else :meth:`Contract.finish`: the dispatcher's conversion (through a companion
op ``() -> returns`` whose kernel hands the result back, so torch's own conversion and errors
apply) and the schema's promises (the number of outputs, no alias of an input or another
output, an in-place op's first argument, an out= op's out arguments), or an error naming the op
and the hook.

Example:
    >>> import torch
    >>> from opclass.install.outputs import Contract
    >>> schema = torch._C.parse_schema("docs_outputs::f(Tensor x) -> (Tensor, int)")
    >>> Contract(schema, ()).finish("docs_outputs::f", (), {}, [torch.ones(1), 2])
    (tensor([1.]), 2)
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import _C

from opclass.core import native
from opclass.core.compat import INPLACE_TAG, tagged_inplace, tagged_out
from opclass.core.types import exact_predicate, jit_type, returns_of
from opclass.define.arguments import written_returns

_refs = sys.getrefcount
_storage_uses = _C._storage_Use_Count
# The StorageImpl's address straight from the Tensor: no storage object is made.
_storage_address: Callable[[Any], int] | None = getattr(_C, "_storage_address", None)

#: Source of the freshness test that generated calls inline for ``_out``, with
#: :data:`INLINE_NAMES` as closure values. It raises for a Tensor without storage (sparse): the
#: generated code treats that as "not fresh". Storage uses: the Tensor alone (an input, view,
#: base or detached alias would be a second); references: ``_out`` and getrefcount's argument.
INLINE_TEST = (
    "type(_out) is _T and _refs(_out) <= 2 and _su(_sa(_out)) <= 1"
    if _storage_address is not None
    else "type(_out) is _T and _refs(_out) <= 2 and _su(_out.untyped_storage()._cdata) <= 2"
)
INLINE_NAMES: dict[str, Any] = {"_T": torch.Tensor, "_refs": _refs, "_su": _storage_uses, "_sa": _storage_address}
# Where the address is missing, the temporary storage object is a second user.
_address: Callable[[Any], int] = _storage_address if _storage_address is not None else (lambda t: t.untyped_storage()._cdata)
_ONLY_OWNER = 1 if _storage_address is not None else 2


def _python_fresh(out: Any) -> bool:
    # References: the caller's variable, this parameter, getrefcount's argument.
    if type(out) is not torch.Tensor or _refs(out) > 3:
        return False
    try:
        return _storage_uses(_address(out)) <= _ONLY_OWNER
    except Exception:  # no storage (a sparse Tensor): the full check decides
        return False


def output_is_fresh() -> Callable[[Any], bool]:
    """``fresh(out)``: True when ``out`` is a plain Tensor that only the caller's local variable
    holds, whose storage nothing else uses, so it cannot alias an input. False means "run the
    full check", never "it aliases". Call it in the frame that received the result."""
    module = native.native_module()
    return module.fresh if module is not None else _python_fresh


def check_arity(where: str, n_returns: int, result: Any) -> None:
    """Raise if a multi-output kernel returned a sequence of the wrong length (the dispatcher
    would crash the process on it, not raise)."""
    if n_returns > 1 and type(result) in (tuple, list) and len(result) != n_returns:
        raise RuntimeError(f"{where}: the kernel returned {len(result)} value{'' if len(result) == 1 else 's'}, but the op's schema declares {n_returns} outputs")


# An op that mutates and returns what it wrote says so in its schema, or returns nothing.
_RETURNS_MUTATED = (
    " If the op returns the argument it mutates, say so: tags=torch.Tag.inplace in the class statement (the first "
    "argument, the only one mutated, is returned), or return nothing (-> None)"
    if INPLACE_TAG is not None
    else " If the op returns the argument it mutates, return nothing instead (-> None): the caller holds it already"
)


class Contract:
    """The output contract of one op (its schema, tags and the names of the arguments it writes):
    :meth:`finish` is the whole rule; ``single`` says when a fresh result is final without it (the
    op returns one Tensor, not an argument of its own)."""

    __slots__ = ("kind", "n_returns", "single", "is_exact", "convert", "outs", "returned", "wrong")

    def __init__(self, schema: torch._C.FunctionSchema, tags: Sequence[torch.Tag], written: Sequence[str] = ()) -> None:
        kinds = returns_of(schema)
        self.is_exact = exact_predicate(kinds)
        #: ``(index, name)`` of the written argument each return is (``-> (Tensor(a!), Tensor(b!))``).
        self.returned = written_returns(schema)
        # What a kernel returning something else is told: torch's words where the op has its tag.
        self.wrong = (
            "an operator tagged with torch.Tag.inplace must return its first argument." if tagged_inplace(tags)
            else "an operator tagged with torch.Tag.out must return its mutable keyword-only arguments." if tagged_out(tags)
            else f"the op's schema says it returns the arguments it writes ({', '.join(n for _, n in self.returned)}), in that order; the kernel returned other values."
        )
        self.kind = "written" if self.returned else "functional" if schema.returns else "none"
        self.n_returns = len(schema.returns)
        # A fresh Tensor cannot alias an input, mutated ones included: final as it is.
        self.single = self.kind == "functional" and kinds == ("Tensor",)
        self.convert = converter(schema, kinds)
        self.outs = tuple(written)

    def finish(self, where: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> Any:
        """``out`` as the dispatcher returns it, or the error that names ``where``."""
        if len(self.returned) == 1 and out is (args[self.returned[0][0]] if self.returned[0][0] < len(args) else kwargs.get(self.returned[0][1])):
            return out  # the argument it writes, as the schema says (what is passed in is a Tensor already)
        if self.kind == "functional":
            out = out if self.is_exact(out) else self.convert(where, out)
            check_arity(where, self.n_returns, out)
            if _C._any_output_is_alias_to_input_or_output(args, kwargs, out if type(out) is tuple else (out,)):
                raise RuntimeError(
                    f"{where}: the output of this custom operator (1) must not also be an input to this "
                    "custom operator and (2) may not alias any inputs to this custom operator or other "
                    "returns. Return a clone of the offending output (e.g. x.clone()) instead."
                    + (_RETURNS_MUTATED if self.outs else "")
                )
        elif self.kind == "none":
            if out is not None:
                self.convert(where, out)  # raises, naming the op and the hook
        else:  # it returns the arguments it writes (in place, out=)
            got = out if isinstance(out, tuple) else (out,)
            if len(got) != len(self.returned) or any(g is not w for g, w in zip(got, self.aliased(args, kwargs, tuple))):
                raise RuntimeError(f"{where}: {self.wrong}")
            out = out if self.is_exact(out) else self.convert(where, out)
        return out

    def aliased(self, args: Sequence[Any], kwargs: Mapping[str, Any], shape: Callable[..., Any] | None = None) -> Any:
        """The arguments the op returns, as it returns them (``shape=tuple``: always a tuple); for
        an op whose returns are its written arguments (in place, ``out=``)."""
        found = [args[i] if i < len(args) else kwargs[n] for i, n in self.returned]
        return tuple(found) if shape is tuple or len(found) != 1 else found[0]

    def checked(self, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with the contract: what the dispatcher calls, at the hook's key."""
        finish, fresh, single = self.finish, output_is_fresh(), self.single

        def checked_kernel(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            return out if single and fresh(out) else finish(where, args, kwargs, out)

        return checked_kernel


_LIB: torch.library.Library | None = None
_COMPANIONS: dict[str, Any] = {}
_PENDING = threading.local()
_LOCK = threading.Lock()
_CPU = _C.DispatchKeySet(_C.DispatchKey.CPU)
# Shared by return text: ops share a few return types.
_CONVERTERS: dict[str, Callable[[str, Any], Any]] = {}


def _companion(returns: str) -> Any:
    """The op ``() -> returns`` whose CPU kernel hands back the pending result."""
    global _LIB
    with _LOCK:
        op = _COMPANIONS.get(returns)
        if op is None:
            _LIB = _LIB or torch.library.Library("opclass_returns", "FRAGMENT")
            name = f"r{len(_COMPANIONS)}"  # companions are never removed: a fresh name
            _LIB.define(f"{name}() -> {returns}")
            _LIB.impl(name, lambda: _PENDING.value, "CPU")
            op = _COMPANIONS[returns] = getattr(torch.ops.opclass_returns, name).default
    return op


def _return_text(schema: torch._C.FunctionSchema) -> str:
    text = str(schema).partition(") -> ")[2]
    # Alias annotations belong to the op, not to a companion without arguments.
    for alias in {r.alias_info for r in schema.returns if r.alias_info is not None}:
        for name in alias.before_set:
            text = text.replace(f"({name}!)", "").replace(f"({name})", "")
    return text


def converter(schema: torch._C.FunctionSchema, kinds: tuple[str, ...]) -> Callable[[str, Any], Any]:
    """``convert(where, result)``: the dispatcher's conversion of a kernel result for this schema
    (``kinds``: its return types), for a result that failed the exact check. A result the op
    cannot return raises what torch raises (``RuntimeError``; ``TypeError`` for "not a sequence")
    with a message naming ``where``, what came back, what the op returns and the fix.

    Stricter than the dispatcher in one way: ``None`` where the schema promises a value that is
    not optional (the dispatcher makes it an undefined Tensor, or ``False``) is refused, as the
    kernel most likely forgot its ``return``.
    """
    returns = _return_text(schema)
    if returns not in _CONVERTERS:
        _CONVERTERS.setdefault(returns, _make_converter(returns, schema, kinds))  # a race makes an equal one
    return _CONVERTERS[returns]


def _make_converter(returns: str, schema: torch._C.FunctionSchema, kinds: tuple[str, ...]) -> Callable[[str, Any], Any]:
    """The converter of every op whose returns read ``returns`` (of ``schema``, only the returns are read)."""
    n_returns = len(schema.returns)
    required = tuple(i for i, r in enumerate(kinds) if jit_type(r).optional is None)

    def convert(where: str, result: Any) -> Any:
        if result is None and (not n_returns or (n_returns == 1 and not required)):
            return None
        missing = n_returns > 1 and isinstance(result, (tuple, list)) and len(result) == n_returns and any(result[i] is None for i in required)
        if not n_returns or (result is None and n_returns == 1) or missing:
            raise RuntimeError(_explain(where, schema, result))
        check_arity(where, n_returns, result)
        op = _companion(returns)
        _PENDING.value = result
        try:
            return op.redispatch(_CPU)
        except (RuntimeError, TypeError) as e:
            error = RuntimeError if isinstance(e, RuntimeError) else TypeError
        finally:
            _PENDING.value = None
        # Outside the except block: torch's message ("Unable to cast ...") says less than ours.
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
    from opclass.install.explain import explain  # only once a result has failed

    return explain(where, schema, result, accepts)
