"""Source of an op class's call function: its exact parameters, cheap guards for "plain eager",
then the kernel; anything else calls the op, exactly as ``torch.ops.ns.op`` does.

The guards: no TorchFunctionMode, no Python dispatch key in TLS (every TorchDispatchMode), no
functorch transform, no jit tracing, profiler off, no forward-AD level, autocast off where the
op has an autocast kernel; every Tensor exactly ``torch.Tensor`` or ``nn.Parameter``, dense,
without conjugate or negative bit, on the first one's device, which has a kernel; every other
argument of the exact Python type the dispatcher would hand the kernel. The Tensor checks are
one C call: the native guard's, or the recorded checks of :mod:`opclass.callpath.pyguard`.

Names in generated code (closure values unless said otherwise): ``_op`` the op's C callable;
``_u_<device>`` the user's kernel, ``_k_<device>`` the same checked by the output contract,
``_where_<device>`` how errors name it; ``_finish`` the output contract, ``_fresh`` its cheap
test; ``_apply_<device>`` / ``_apply`` the fast / generic autograd.Function's apply, ``_Call``
its per-call record; ``_bump`` the version-counter bump; ``_M`` "not passed"; where providers
choose, ``_p_<device>_<i>`` / ``_u_<device>_<i>`` the choice's candidates, ``_refuse_<device>``
its refusal, ``_block`` the ``use_providers`` context variable's getter, ``_in_block`` a block's
choice for the op; with the Python guard ``_s`` the op's records, ``_miss`` the exact check,
``_NT`` the stand-in for ``None``. Locals: ``_g`` / ``_c`` the guard's code, ``_e`` a record,
``_f`` the freshness, ``_out`` the result, ``_a`` / ``_k`` extra positional / keyword arguments,
``_v`` their merge, ``_b`` / ``_ch`` a block and its choice.

Example:
    >>> from opclass.callpath.source import merge_keywords
    >>> merge_keywords((), {"y": 2}, (1, pyguard.MISSING), ("x", "y"))  # the Python guard's keywords
    (1, 2)
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C

from opclass.callpath import pyguard
from opclass.callpath.dynamo import warn_specialized
from opclass.core import native
from opclass.core.types import BUMP, CHECK_NAMES, DEVICE_CODES, FAST_DEVICES, GRAD, guard_text
from opclass.define.arguments import Argument
from opclass.install.conventions import WRITES
from opclass.install.functions import Call, functions
from opclass.install import orders
from opclass.install.outputs import INLINE_NAMES, INLINE_TEST, output_is_fresh
from opclass.install.record import OpRecord, lookup
from opclass.install.table import not_bool

__all__ = ["call_source", "c_entry", "merge_keywords", "call_original", "call_passed", "out_class"]


def merge_keywords(extra: tuple[Any, ...], keywords: dict[str, Any], values: tuple[Any, ...], names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The positional parameters' values with ``keywords`` filled in, or ``None`` where the
    dispatcher must parse the call (too many arguments, an unknown or repeated keyword) and raise."""
    if extra:
        return None
    merged = dict(zip(names, values))
    for name, value in keywords.items():
        if merged.get(name) is not pyguard.MISSING:  # unknown (None), or passed twice
            return None
        merged[name] = value
    return tuple(merged.values())


def call_original(op: Any, values: tuple[Any, ...], extra: tuple[Any, ...], keywords: dict[str, Any]) -> Any:
    """``op`` called as the caller called the class (``values``: the positional parameters)."""
    missing = pyguard.MISSING
    return op(*[v for v in values if v is not missing], *extra, **{k: v for k, v in keywords.items() if v is not missing})


def call_passed(op: Any, names: tuple[str, ...], values: tuple[Any, ...], keywords: dict[str, Any]) -> Any:
    """``op`` with only the arguments the caller passed (some are missing): for torch's error.
    Those before the first missing one positionally, the others by name."""
    missing = pyguard.MISSING
    n = next((i for i, v in enumerate(values) if v is missing), len(values))
    return op(*values[:n], **{k: v for k, v in (*zip(names[n:], values[n:]), *keywords.items()) if v is not missing})


def call_source(record: OpRecord, name: str, *, guard: str, as_new: bool) -> tuple[str, dict[str, Any]]:
    """Source of ``def name(...)`` and the closure it needs: the op's exact parameters (``as_new``:
    the class's ``__new__``, which nothing can fail to bind, see :class:`_Head`), the fast path
    the plan allows written for ``guard`` (``"native"`` or ``"python"``), then the op."""
    assert record.op is not None
    closure: dict[str, Any] = {"_op": record.op._op}  # what OpOverload.__call__ calls, one frame less
    if record.arguments.underscored:
        # A parameter could shadow a generated name (_op...): take everything as given.
        return f"def {name}({'_cls, /, ' if as_new else ''}*args, **kwargs):\n    return _op(*args, **kwargs)\n", closure
    head = _Head(record, closure, as_new)
    body = _Body(record, closure, guard).lines() if record.plan is not None and record.plan.off is None else []
    formula = record.formula
    if record.functorch_entry is not None and not record.mutated and formula is not None and (formula.backward is not None or formula.jvp is not None):
        # Under torch.func transforms an op with a formula is differentiated from Python: the
        # dispatcher cannot run functorch's handling of autograd.Functions inside a kernel.
        closure.update({"_ft": _C._are_functorch_transforms_active, "_ft_entry": record.functorch_entry})
        body += ["    if _ft():", f"        return _ft_entry({record.arguments.call()})"]
    return "\n".join([*head.lines(name), *body, *head.tail()]) + "\n", closure


class _Head:
    """The parameter list and the call of the op, in either form.

    Plain: ``def name(x, k=<default>, *, out)``; ``OpMeta``'s C call passes the arguments.
    As ``__new__`` (the Python guard's class call, one frame from ``type.__call__``): Python would
    raise its own TypeError for arguments that do not bind, before any line ran, where torch.ops
    raises the dispatcher's error; so nothing can fail to bind: positional parameters are
    positional-only and default to ``_M``, extra ones land in ``*_a`` and keywords in ``**_k``.
    The first lines merge keywords into the parameters (or let the dispatcher parse a call it
    would refuse), the last ones call the op with what was passed.
    """

    def __init__(self, record: OpRecord, closure: dict[str, Any], as_new: bool) -> None:
        self.closure, self.as_new, self.table, self.record = closure, as_new, record.arguments, record
        closure.update({f"_default_{a.name}": a.default for a in self.table if a.has_default})
        if as_new:
            closure.update({"_M": pyguard.MISSING, "_merge": merge_keywords, "_call_passed": call_passed, "_call_original": call_original, "_names": tuple(a.name for a in self.table.positional)})
        # MyOp(x, out=buf) calls the .out overload's class, as torch.ops.ns.op(x, out=buf) picks that overload.
        out = out_class(record)
        self.outs = record.convention.outs if out is not None else ()
        if out is not None:
            closure["_to_out"] = out

    def lines(self, name: str) -> list[str]:
        table, outs = self.table, self.outs
        extra = ", ".join(f"{n}=None" for n in outs)
        route = [f"    if {' or '.join(f'{n} is not None' for n in outs)}:", f"        return _to_out({', '.join([table.call(), *(f'{n}={n}' for n in outs)]).lstrip(', ')})"] if outs else []
        if not self.as_new:
            params = table.parameters(default=lambda a: f"_default_{a.name}")
            if outs:
                params = params[:-1] + (", " if params != "()" else "") + ("" if table.keyword_only else "*, ") + extra + ")"
            return [f"def {name}{params}:", *route]
        # _M even where the schema has a default: the dispatcher's errors count what was passed.
        positional = [a.name for a in table.positional]
        signature = ", ".join(["_cls", *(f"{n}=_M" for n in positional), *(["/"] if positional else []), "*_a", *(f"{a.name}=_M" for a in table.keyword_only), *([extra] if outs else []), "**_k"])
        values = table.args_text()
        lines = [
            f"def {name}({signature}):",
            "    if _a or _k:",
            f"        _v = _merge(_a, _k, {values}, _names)",
            "        if _v is None:",
            f"            return _call_original(_op, {values}, _a, {{**{table.kwargs_text()}, **_k}})",
        ]
        if positional:
            lines.append(f"        {', '.join(positional)}, = _v")
        return lines + [f"    if {a.name} is _M:\n        {a.name} = _default_{a.name}" for a in table if a.has_default] + route

    def tail(self) -> list[str]:
        required = [a.name for a in self.table if not a.has_default]
        lines = []
        if self.as_new and required:
            lines = [f"    if {' or '.join(f'{n} is _M' for n in required)}:", f"        return _call_passed(_op, _names, {self.table.args_text()}, {self.table.kwargs_text()})"]
        # A symbolic size (tracing) for a plain int: torch specializes it; say so once.
        for a in self.table:
            if a.plain_int:
                self.closure.update({"_SymInt": torch.SymInt, "_specialized": functools.partial(warn_specialized, self.record)})
                lines.append(f"    if type({a.name}) is _SymInt:\n        _specialized({a.name!r})")
        return lines + [f"    return _op({self.table.call()})"]


class _Body:
    """The guarded fast path: the guard for ``guard``, then each device's kernel call."""

    def __init__(self, record: OpRecord, closure: dict[str, Any], guard: str) -> None:
        assert record.plan is not None
        self.record, self.plan, self.closure, self.table, self.kernels = record, record.plan, closure, record.arguments, record.plan.kernels
        self.native = native.native_module() if guard == "native" else None
        closure.update({f"_cfg_{a.name}": a.config for a in self.table if a.config is not None})
        self.value_guards = [
            f"type({a.name}) is _cfg_{a.name}" if a.config is not None else guard_text(a.jit, a.name) or "False" for a in self.table if not a.kind.tensor
        ]
        fns = functions(record)
        # Where providers choose, a use_providers block open in the caller's context may choose
        # otherwise: its choice, cached in the block (see in_block).
        if any(k.choice is not None for k in self.kernels.values()):
            closure.update({"_block": orders.BLOCK.get, "_in_block": in_block(record, _closure_key(record))})
        closure.update(
            {
                "_tfm": _C._is_torch_function_mode_enabled, "_profiling": _C._autograd._profiler_enabled, "_fw": _forward_ad,
                "_grad": _C.is_grad_enabled, "_autocast": _C._is_any_autocast_enabled, "_excluded": _C._dispatch_tls_is_dispatch_key_excluded,
                "_ADIV": _C.DispatchKey.ADInplaceOrView, "_bump": _C._increment_version, "_Call": Call, "_apply": _c_apply(fns.generic),
                "_finish": record.outputs.finish, "_fresh": output_is_fresh(), **CHECK_NAMES,
            }
        )
        for d, k in self.kernels.items():
            closure.update({f"_k_{d}": k.checked, f"_u_{d}": k.user, f"_where_{d}": k.where})
        closure.update({f"_apply_{d}": _c_apply(fn_cls) for d, fn_cls in fns.fast.items()})

    def lines(self) -> list[str]:
        tensors = [a for a in self.table if a.kind.tensor]
        if not tensors:
            return self._by_device_argument()
        return self._native(tensors) if self.native is not None else self._recorded()

    def _native(self, tensors: list[Argument]) -> list[str]:
        """One C call classifies every Tensor argument and the thread-local state."""
        assert self.native is not None
        self.closure.update({"_guard": self.native.guard, "_spec": "".join(a.kind.letter for a in tensors).encode()})
        conditions = ["_g", *self.value_guards] + (["not _autocast()"] if self.plan.autocast_devices else [])
        ind = "        "
        lines = [f"    _g = _guard(_spec, {', '.join(a.name for a in tensors)})", f"    if {' and '.join(conditions)}:", *self._lists_from_tuples(ind)]
        for d in self.kernels:
            lines += [f"{ind}if _g == {DEVICE_CODES[d]}:", *self._kernel_call(d, ind + "    ")]
            lines += [f"{ind}if _g == {DEVICE_CODES[d] | GRAD}:", *self._grad_lines(d, ind + "    ")]
        return lines

    def _by_device_argument(self) -> list[str]:
        """An op without Tensor arguments: the exact thread-local checks, then its ``Device`` argument's kernel."""
        self.closure.update(
            {"_included_set": _C._dispatch_tls_local_include_set, "_included_ok": pyguard.INCLUDED_OK, "_excluded_set": _C._dispatch_tls_local_exclude_set, "_bad_excluded": pyguard.BAD_EXCLUDED}
        )
        guard = "_tfm() or _included_set().raw_repr() not in _included_ok or _excluded_set().raw_repr() & _bad_excluded or _profiling() or _fw._current_level >= 0"
        lines, ind = [f"    if not ({guard}{' or _autocast()' if self.plan.autocast_devices else ''}):"], "        "
        if self.value_guards:
            lines.append(f"{ind}if {' and '.join(self.value_guards)}:")
            ind += "    "
        lines += self._lists_from_tuples(ind)
        device = next(a.name for a in self.table if a.is_device)
        for i, d in enumerate(self.kernels):
            lines += [f"{ind}{'elif' if i else 'if'} {device}.type == '{d}':", *self._kernel_call(d, ind + "    ")]
        return lines

    def _recorded(self) -> list[str]:
        """The Python guard: thread-local checks on every call, then one C call that compares
        every Tensor with a recorded plain call of the op (see :mod:`opclass.callpath.pyguard`)."""
        self.closure.update({"_s": pyguard.Slots(), "_miss": pyguard.miss, "_devices": frozenset(self.kernels), "_NT": pyguard.NO_TENSOR, **INLINE_NAMES})
        # What the recorded key sets cannot show, checked on every call.
        self.closure.update({"_modes": _C._len_torch_dispatch_stack, "_tracing": _C._is_tracing, "_included": _C._dispatch_tls_is_dispatch_key_included, "_PD": _C.DispatchKey.PythonDispatcher})
        guard = "_tfm() or _profiling() or _fw._current_level >= 0 or _modes() or _tracing() or _included(_PD)"
        if self.plan.autocast_devices:
            guard += " or _autocast()"  # else a miss under autocast would record it as plain
        lines, ind = [f"    if not ({guard}):"], "        "
        lists = [a.name for a in self.table if a.kind.tensor == "list"]
        guards = [f"type({n}) in _seq" for n in lists] + self.value_guards
        if guards:
            lines.append(f"{ind}if {' and '.join(guards)}:")
            ind += "    "
        flat = []
        for a in self.table:
            optional = a.kind.letter in ("O", "M")  # None stands where a Tensor may be
            if a.kind.tensor == "one":
                flat.append(f"(_NT if {a.name} is None else {a.name})" if optional else a.name)
            elif a.kind.tensor == "list":
                flat.append(f"*[_NT if _x is None else _x for _x in {a.name}]" if optional else f"*{a.name}")
        values = ", ".join(flat)
        miss = f"(None, _miss(_s, ({values},), _devices))"
        if lists:
            # A list of another length than recorded: TensorGuards raises TypeError (a miss).
            lines += [f"{ind}_t = ({values},)", f"{ind}try:", f"{ind}    _e = _s[0]", f"{ind}    if not _e[0](*_t):", f"{ind}        _e = _s[1]",
                      f"{ind}        if not _e[0](*_t):", f"{ind}            _e = {miss}", f"{ind}except TypeError:", f"{ind}    _e = {miss}"]
        else:
            lines += [f"{ind}_e = _s[0]", f"{ind}if not _e[0]({values}):", f"{ind}    _e = _s[1]", f"{ind}    if not _e[0]({values}):", f"{ind}        _e = {miss}"]
        lines += [f"{ind}_c = _e[1]", f"{ind}if _c:"]
        ind += "    "
        lines += self._lists_from_tuples(ind)
        # The guard's code names one of the devices: the last one needs no test.
        *others, last = self.kernels
        lines.append(f"{ind}if _c & {GRAD} and _grad():")
        for d in others:
            lines += [f"{ind}    if _c & {DEVICE_CODES[d]}:", *self._grad_lines(d, ind + "        ")]
        lines += self._grad_lines(last, ind + "    ")
        for d in others:
            lines += [f"{ind}if _c & {DEVICE_CODES[d]}:", *self._kernel_call(d, ind + "    ", bump=f"_c & {BUMP}", inline_fresh=True)]
        return lines + self._kernel_call(last, ind, bump=f"_c & {BUMP}", inline_fresh=True)

    def _lists_from_tuples(self, ind: str) -> list[str]:
        # The dispatcher hands kernels lists; callers may pass tuples (and list defaults are tuples).
        return [line for a in self.table if a.is_list for line in (f"{ind}if type({a.name}) is tuple:", f"{ind}    {a.name} = list({a.name})")]

    def _grad_lines(self, device: str, ind: str) -> list[str]:
        if self.plan.grad == "dispatcher":
            # Autograd through a mutation, or out= under grad: the dispatcher decides (or raises).
            return [f"{ind}return _op({self.table.call()})"]
        lines, names = [], ", ".join(self.table.names)
        if self.kernels[device].choice is not None:
            # A block that concerns the op: the dispatcher's kernels make its choice.
            lines = [f"{ind}_b = _block()", f"{ind}if _b is not None and _in_block(_b) is not None:", f"{ind}    return _op({self.table.call()})"]
        if self.plan.grad == "eager":
            # Differentiate through the kernel: call it with autograd on, as the Autograd kernel does.
            return lines + self._kernel_call(device, ind, differentiable=True)
        if f"_apply_{device}" in self.closure:
            return lines + [f"{ind}return _apply_{device}({names})"]
        return [*lines, f"{ind}return _apply({names}, _Call(None, {len(self.table.positional)}, {tuple(a.name for a in self.table.keyword_only)!r}, _k_{device}))"]

    def _kernel_call(self, device: str, ind: str, differentiable: bool = False, bump: str = "not _excluded(_ADIV)", inline_fresh: bool = False) -> list[str]:
        """Bump written arguments' versions, call the kernel (where providers choose, the first
        candidate whose predicate takes the call), finish its output, return."""
        table, choice = self.table, self.kernels[device].choice
        lines = []
        if table.written:
            # Before the kernel, as on the dispatcher path: a kernel that raises has still written.
            names = ", ".join(a.name for a in table.written) + ("," if len(table.written) == 1 else "")
            tensors = f"({names})"
            if any(a.jit != "Tensor" for a in table.written):
                tensors = f"[_t for _v in ({names}) for _t in (_v if type(_v) is list else (_v,)) if _t is not None]"
            lines += [f"{ind}if {bump}:", f"{ind}    _bump({tensors})"]  # _bump skips inference tensors
        if choice is None:
            return lines + self._call(f"_u_{device}", f"_where_{device}", ind, differentiable, inline_fresh)
        lines += [f"{ind}_b = _block()", f"{ind}if _b is not None:", f"{ind}    _ch = _in_block(_b)", f"{ind}    if _ch is not None:", f"{ind}        return _ch[2][{device!r}].fast({table.call()})"]
        # The choice inline: each candidate up to the first that takes every call.
        for i, e in enumerate(choice.tried):
            self.closure.update({f"_u_{device}_{i}": e.fn, f"_where_{device}_{i}": e.where})
            if e.options.supports is None:
                return lines + self._call(f"_u_{device}_{i}", f"_where_{device}_{i}", ind, differentiable, inline_fresh)
            self.closure.update({f"_p_{device}_{i}": e.options.supports, f"_nb_{device}_{i}": functools.partial(not_bool, e)})
            lines += [f"{ind}_r = _p_{device}_{i}({table.call()})", f"{ind}if _r is not False:", f"{ind}    if _r is not True:", f"{ind}        _nb_{device}_{i}(_r)"]
            lines += self._call(f"_u_{device}_{i}", f"_where_{device}_{i}", ind + "    ", differentiable, inline_fresh)
        self.closure[f"_refuse_{device}"] = choice.refuse
        return lines + [f"{ind}return _refuse_{device}({table.call()})"]  # no candidate takes it

    def _call(self, fn: str, where: str, ind: str, differentiable: bool, inline_fresh: bool) -> list[str]:
        record, table = self.record, self.table
        finish = f"_out = _finish({where}, {table.args_text()}, {table.kwargs_text()}, _out)"
        lines = [f"{ind}_out = {fn}({table.call()})"]
        if differentiable:  # a torch error of the kernel run with autograd on names the op and the kernel
            self.closure["_check_differentiable"] = record.differentiates_kernel
            lines = [f"{ind}try:", f"    {lines[0]}", f"{ind}except Exception as _e:", f"{ind}    _check_differentiable({where}, _e)"]
        if record.outputs.single:
            # Fresh: a plain Tensor only this frame holds, whose storage nothing else uses.
            if inline_fresh:  # the test raises for an output without storage: not fresh
                lines += [f"{ind}try:", f"{ind}    _f = {INLINE_TEST}", f"{ind}except Exception:", f"{ind}    _f = False"]
            lines += [f"{ind}if not {'_f' if inline_fresh else '_fresh(_out)'}:", f"{ind}    {finish}"]
        elif record.outputs.kind == "none":
            lines += [f"{ind}if _out is not None:", f"{ind}    {finish}"]
        else:
            lines.append(f"{ind}{finish}")
        return lines + [f"{ind}return _out"]


def c_entry(record: OpRecord) -> tuple[Any, ...] | None:
    """What the native class call needs to run a simple op's plain-eager call entirely in C, or ``None``:
    ``(spec, single, kernel_cpu, kernel_cuda, apply_cpu, apply_cuda, finish, blocks, key)``.

    Only for the cases the generated function handles without extra logic: positional Tensor,
    float, int and bool parameters (all passed), a functional op, no autocast kernel. The C code
    makes the same decisions as the generated function (same guard; exact types for the numbers)
    and hands every other call to it. Only where ``single`` is a fresh Tensor final: every other
    result goes through ``finish``, the output contract. Where providers choose, ``blocks`` is
    the ``use_providers`` context variable and ``key`` the op's key in a block's cache: a block
    that concerns the op has its kernels there (a miss: the generated function fills it in).
    """
    module, plan, table = native.native_module(), record.plan, record.arguments
    # An .out or in-place overload: it writes the arguments it returns (the out buffers by keyword).
    written = record.convention.kind != "functional" and record.outputs.returned and all(a.jit == "Tensor" for a in table.written)
    keywords = tuple(a.name for a in table.keyword_only)
    if (
        module is None or plan is None or plan.autocast_devices
        or not (written or (record.outputs.kind == "functional" and not table.written))
        or (keywords and keywords != record.convention.outs)
        or any(a.kind.entry is None for a in table)
        or not any(a.jit == "Tensor" for a in table)
    ):
        return None
    fast = functions(record).fast
    kernels = [_entry_kernel(plan.kernels[d].choice, plan.kernels[d].user) if d in plan.kernels else None for d in FAST_DEVICES]
    if written and len(record.outputs.returned) == 1:
        # The C entry returns the written argument itself: a kernel that writes it runs unadapted.
        kernels = [tuple(map(_writer, k)) if isinstance(k, tuple) else _writer(k) for k in kernels]
    applies = [_c_apply(fast[d]) if d in fast else None for d in FAST_DEVICES]  # fast: only where plan.grad is "function"
    wheres = {**{e.fn: e.where for e in record.table.entries}, **{k.user: k.where for k in plan.kernels.values()}}
    finish = record.outputs.finish

    def finish_entry(kernel: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        """A kernel's output that is not final: the output contract, naming the kernel that ran."""
        return finish(wheres[kernel], args, kwargs, out)

    spec = "".join(a.kind.entry or "" for a in table).encode()
    choosing = any(k.choice is not None for k in plan.kernels.values())
    entry = (spec, record.outputs.single, *kernels, *applies, finish_entry, orders.BLOCK if choosing else None, _closure_key(record) if choosing else None)
    route = out_class(record) if not keywords else None
    if written or route is not None:
        returned = record.outputs.returned[0][0] if len(record.outputs.returned) == 1 else -1
        entry += (record.convention.outs, route, tuple(a.index for a in table.written) or None, returned)
    return entry


def in_block(record: OpRecord, key: object) -> Callable[[orders.Block], Any]:
    """``in_block(block)``: ``None`` where the block does not concern the op, else the op's choice
    in it, ``(C kernel for cpu, C kernel for cuda, {device: Choice})``, cached in the block under
    ``key`` (the C entry reads the cache)."""
    table, devices = record.table, [d for d in FAST_DEVICES if record.plan is not None and d in record.plan.kernels]

    def in_block(block: orders.Block) -> Any:
        state = block.state  # first: a changed process-wide state empties the cache
        found = block.get(key, in_block)
        if found is in_block:
            found = None
            if block.concerns(table.qualname):
                choices = {d: table.choice(d if d in table.kernels else None, state) for d in devices}
                found = (*(_entry_kernel(choices[d], None) if d in choices else None for d in FAST_DEVICES), choices)
            block[key] = found
        return found

    return in_block


def _closure_key(record: OpRecord) -> object:
    """The op's key in a block's cache: one per install and process-wide state (a change of that
    state arms the class again, and the new key misses what a block cached before)."""
    found = _KEYS.get(record)
    if found is None or found[0] != orders.version():
        found = _KEYS[record] = (orders.version(), object())
    return found[1]


_KEYS: weakref.WeakKeyDictionary[OpRecord, tuple[int, object]] = weakref.WeakKeyDictionary()


def _entry_kernel(choice: Any, user: Any) -> Any:
    """The C entry's kernel for a device: the function, or where providers choose, the tuple
    ``(predicate, function, ..., last)`` (``last``: the candidate without a predicate, or the
    refusal); a tuning table's predicate, where it can, as ``(places, {dtype: (low, high)})``,
    which the C entry tests itself."""
    if choice is None:
        return user
    tried = choice.tried
    if len(tried) == 1 and tried[0].options.supports is None:
        return tried[0].fn
    tests = choice.native_tests
    pairs = [x for i, e in enumerate(tried) if e.options.supports is not None for x in (tests.get(i, e.options.supports), e.fn)]
    return (*pairs, tried[-1].fn if tried and tried[-1].options.supports is None else choice.refuse)


def out_class(record: OpRecord) -> Any:
    """The class of the op's ``.out`` overload (``out=True``), which ``MyOp(x, out=buf)`` calls, or ``None``."""
    out = dict(record.convention.siblings).get("out")
    found = lookup(out) if out is not None else None
    return found.owner() if found is not None else None


def _writer(fn: Any) -> Any:
    """The user's kernel where ``fn`` adapts one written in the overload's own style (only its
    return differs), else ``fn`` (a predicate, a refusal, another adapter)."""
    adapter, kernel = getattr(fn, WRITES, (None, None))
    return kernel if adapter is fn else fn


def _c_apply(fn_cls: type[torch.autograd.Function]) -> Callable[..., Any]:
    """The Function's C-level ``apply`` (skips Python ``Function.apply``'s functorch handling,
    which the guards already ruled out); the Python one for Tensor-list ops, which needs it."""
    if "apply" in vars(fn_cls) and not isinstance(vars(fn_cls)["apply"], classmethod):
        return fn_cls.apply  # supports_tensorlist's wrapper
    return _C._FunctionBase.__dict__["apply"].__get__(None, fn_cls)  # type: ignore[no-any-return]
