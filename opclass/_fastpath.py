"""Source of the per-class call function: cheap guards for "plain eager", then the kernel.

The generated function has the op's exact parameter list. When every guard holds it calls the
backend kernel itself (or applies the op's autograd.Function when grad is needed); otherwise it
calls the OpOverload, i.e. does exactly what ``torch.ops.ns.op`` does.

Guards, in order of cost:
  global  no TorchFunctionMode (this covers ``torch.device`` contexts), no Python dispatch key in
          TLS (every TorchDispatchMode, FakeTensorMode, proxy/functional modes), no functorch
          transform, no jit tracing, profiler off, no forward-AD level, autocast off when the op
          has an autocast rule;
  types   every Tensor argument exactly ``torch.Tensor`` or ``nn.Parameter``; non-Tensor
          arguments of the exact Python type the dispatcher would hand the kernel;
  device  every Tensor on the device of the first one, which has a kernel (cpu, cuda);
  plain   strided layout, no conjugate or negative bit.

The Tensor checks are one C call: the native guard's, or with the Python guard torch's Tensor
check against the op's recorded plain calls (:mod:`opclass._pyguard`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import _C

from . import _native, _pyguard
from ._autograd import _Call
from ._eager import check_differentiable
from ._plan import FAST_DEVICES, CallPlan
from ._record import OpRecord
from ._returns import converter, exact_check, exact_predicate
from ._alias import INLINE_NAMES, INLINE_TEST, check_outputs, output_is_fresh

# Exact Python types the dispatcher passes to a Python kernel, per schema type.
_SCALAR_TYPES: dict[str, str] = {
    # The dispatcher rejects ints outside int64 with RuntimeError; the kernel must never see them.
    "int": "(type({v}) is int and -9223372036854775808 <= {v} <= 9223372036854775807)",
    "float": "type({v}) is float",
    "bool": "type({v}) is bool",
    "str": "type({v}) is str",
    "number": "type({v}) in _number",
    "ScalarType": "type({v}) is _dtype",
    "Device": "type({v}) is _device",
    "Layout": "type({v}) is _layout",
    "MemoryFormat": "type({v}) is _memory_format",
}


def merge_keywords(extra: tuple[Any, ...], keywords: dict[str, Any], values: tuple[Any, ...], names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The positional parameters' values with ``keywords`` filled in, or ``None`` where the
    dispatcher must parse the call (too many arguments, an unknown or repeated keyword) and raise."""
    if extra:
        return None
    merged = list(values)
    for name, value in keywords.items():
        try:
            i = names.index(name)
        except ValueError:
            return None
        if merged[i] is not _pyguard.MISSING:
            return None
        merged[i] = value
    return tuple(merged)


def call_original(op: Any, values: tuple[Any, ...], extra: tuple[Any, ...], keywords: dict[str, Any]) -> Any:
    """``op`` called as the caller called the class (``values``: the positional parameters)."""
    missing = _pyguard.MISSING
    return op(*[v for v in values if v is not missing], *extra, **{k: v for k, v in keywords.items() if v is not missing})


def call_passed(op: Any, names: tuple[str, ...], values: tuple[Any, ...], keywords: dict[str, Any]) -> Any:
    """``op`` with only the arguments the caller passed (some are missing): for torch's error."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, value in zip(names, values):
        if value is _pyguard.MISSING:
            continue
        if kwargs or len(args) < names.index(name):
            kwargs[name] = value
        else:
            args.append(value)
    kwargs.update((k, v) for k, v in keywords.items() if v is not _pyguard.MISSING)
    return op(*args, **kwargs)


@dataclasses.dataclass
class _Param:
    name: str
    jit: str  # Argument.real_type as text
    kwarg_only: bool

    @property
    def tensor(self) -> bool:
        return self.jit in ("Tensor", "Optional[Tensor]")

    @property
    def tensor_list(self) -> bool:
        return self.jit in ("List[Tensor]", "List[Optional[Tensor]]")

    @property
    def optional(self) -> bool:
        return self.jit.startswith("Optional[")


def _value_guard(p: _Param, configs: Mapping[str, type]) -> str | None:
    """Type guard for a non-Tensor argument; ``None`` when none can be written cheaply."""
    jit = p.jit
    if jit == "PyObject":
        # The dispatcher passes any object through; the fast path takes only the config class.
        return f"type({p.name}) is _cfg_{p.name}" if p.name in configs else None
    inner = jit[len("Optional[") : -1] if p.optional else jit
    if inner in _SCALAR_TYPES:
        check = _SCALAR_TYPES[inner].format(v=p.name)
    elif inner.startswith("List[") and inner[len("List[") : -1] in _SCALAR_TYPES:
        elem = _SCALAR_TYPES[inner[len("List[") : -1]].format(v="_e")
        check = f"type({p.name}) in _seq and all({elem} for _e in {p.name})"
    else:
        return None
    return f"({p.name} is None or {check})" if p.optional else check


def has_guard(arg: Any, configs: Mapping[str, type]) -> bool:
    """Whether the generated code can check an argument of this schema ``Argument`` cheaply."""
    p = _Param(arg.name, str(arg.real_type), arg.kwarg_only)
    return p.tensor or p.tensor_list or _value_guard(p, configs) is not None


def fast_source(record: OpRecord, name: str, python_guard: bool = False, as_new: bool = False) -> tuple[str, dict[str, Any]] | None:
    """Source and closure of a guarded call function, or ``None`` if the plan has no fast path.

    The function takes the op's arguments as the op does (``OpMeta``'s C call passes them), or,
    with ``as_new``, is the class's ``__new__`` (see :func:`python_signature`).
    ``python_guard``: write the pure-Python guard even where the native one is loaded (the
    three-way check of :mod:`opclass.testing` compares the two).
    """
    plan = record.plan
    if plan is None or plan.off is not None or record.make_autograd_function is None:
        return None
    params = [_Param(a.name, str(a.real_type), a.kwarg_only) for a in record.schema.arguments]
    configs = plan.configs
    value_guards = [_value_guard(p, configs) or "False" for p in params if not (p.tensor or p.tensor_list)]
    tensors = [p for p in params if p.tensor]
    lists = [p for p in params if p.tensor_list]
    closure = _closure(record, plan)
    closure.update({f"_cfg_{name}": cls for name, cls in configs.items()})
    gen = _Generator(record, params, closure)
    native = None if python_guard else _native.native_module()
    if as_new:
        signature, head_lines, tail = python_signature(record, closure, gen.call_args)
        head = [f"def {name}({signature}):", *head_lines]
    else:
        head, tail = [f"def {name}({gen.signature()}):"], [f"    return _op({gen.call_args})"]
    if native is not None and (tensors or lists):
        lines = gen.native(native, tensors, lists, value_guards)
    elif tensors or lists:
        lines = gen.cached(tensors, lists, value_guards)
    else:
        lines = gen.python(value_guards)
    source = "\n".join([*head, *lines, *functorch_lines(record, closure, gen.call_args), *tail]) + "\n"
    return source, closure


def python_signature(record: OpRecord, closure: dict[str, Any], call_args: str) -> tuple[str, list[str], list[str]]:
    """The Python guard's call as the class's ``__new__``: its signature, first lines and last lines.

    ``MyOp(...)`` then runs it straight from ``type.__call__``, one frame in all. Python would
    raise its own TypeError for arguments that do not bind, before any line of it runs, where
    torch.ops raises the dispatcher's error; so nothing can fail to bind: positional parameters
    are positional-only and default to ``MISSING``, extra ones land in ``*_a`` and keywords in
    ``**_k``. The first lines merge keywords into the parameters (or let the dispatcher parse a
    call it would refuse), the last ones call the op with what was passed.
    """
    closure.update({"_M": _pyguard.MISSING, "_merge": merge_keywords, "_call_passed": call_passed, "_call_original": call_original})
    positional: list[str] = []
    parts = ["_cls"]
    keyword_parts: list[str] = []
    defaults: list[str] = []
    required: list[str] = []
    keyword_only: list[str] = []
    for p in record.signature.parameters.values():
        has_default = p.default is not p.empty
        if has_default:
            closure[f"_default_{p.name}"] = p.default
        # MISSING even where the schema has a default: the dispatcher's errors count what was passed.
        if p.kind is p.KEYWORD_ONLY:
            keyword_only.append(p.name)
            keyword_parts.append(f"{p.name}=_M")
        else:
            positional.append(p.name)
            parts.append(f"{p.name}=_M")
        if has_default:
            defaults.append(p.name)
        if not has_default:
            required.append(p.name)
    closure["_names"] = tuple(positional)
    values = "(" + "".join(f"{n}, " for n in positional) + ")"
    keywords = "{" + ", ".join(f"{k!r}: {k}" for k in keyword_only) + "}"
    signature = ", ".join(parts + (["/"] if positional else []) + ["*_a", *keyword_parts, "**_k"])
    head = [
        "    if _a or _k:",
        f"        _v = _merge(_a, _k, {values}, _names)",
        "        if _v is None:",
        f"            return _call_original(_op, {values}, _a, {{**{keywords}, **_k}})",
    ]
    if positional:
        head.append(f"        {', '.join(positional)}, = _v")
    head += [f"    if {n} is _M:\n        {n} = _default_{n}" for n in defaults]
    tail = []
    if required:
        tail += [f"    if {' or '.join(f'{n} is _M' for n in required)}:", f"        return _call_passed(_op, _names, {values}, {keywords})"]
    tail.append(f"    return _op({call_args})")
    return signature, head, tail


_C_LETTERS = {"Tensor": "T", "Optional[Tensor]": "O", "float": "f", "int": "i", "bool": "b"}


def c_entry(record: OpRecord) -> tuple[Any, ...] | None:
    """What the native class call needs to run a simple op's plain-eager call entirely in C:
    ``(spec, single, kernel_cpu, kernel_cuda, apply_cpu, apply_cuda, finish)``, or ``None``.

    Only for the cases the generated function handles without extra logic: positional Tensor,
    float, int and bool parameters (all passed), fresh outputs, no autocast kernel. The C code
    makes the same decisions as the generated function (same guard; exact types for the numbers)
    and hands every other call to it. ``single`` is the plan's: only then is a fresh Tensor final;
    every other result goes through ``finish``, the conversion the dispatcher would do.
    """
    native = _native.native_module()
    plan = record.plan
    params = record.schema.arguments
    if (
        native is None
        or plan is None
        or not _cheap_alias(record)
        or record.mutated
        or plan.autocast
        or any(a.kwarg_only or str(a.real_type) not in _C_LETTERS for a in params)
        or not any(str(a.real_type) == "Tensor" for a in params)
    ):
        return None
    kernels: list[Any] = []
    applies: list[Any] = []
    for d in FAST_DEVICES:
        kernel = plan.kernels.get(d)
        kernels.append(kernel.user if kernel is not None else None)
        fn_cls = record.fast_functions.get(d)
        applies.append(_c_apply(fn_cls) if kernel is not None and fn_cls is not None and plan.grad == "function" else None)
    n_returns = len(record.schema.returns)
    convert = converter(record.schema)
    is_exact = exact_predicate(record.schema)
    wheres = {d: k.where for d, k in plan.kernels.items()}

    def finish(out: Any, *args: Any) -> Any:
        """A kernel's output that is not final: the conversion (or its error), then the full check."""
        where = wheres[next(a.device.type for a in args if isinstance(a, torch.Tensor))]
        if not is_exact(out):
            out = convert(where, out)
        check_outputs(where, n_returns, args, {}, out)
        return out

    spec = "".join(_C_LETTERS[str(a.real_type)] for a in params).encode()
    return (spec, plan.single_tensor, *kernels, *applies, finish)


def functorch_lines(record: OpRecord, closure: dict[str, Any], call_args: str) -> list[str]:
    """Under torch.func transforms, an op with a formula is differentiated from Python: the
    dispatcher cannot run functorch's handling of autograd.Functions from inside a kernel."""
    if record.functorch_entry is None or record.mutated or (record.backward is None and record.jvp is None):
        return []
    closure["_ft"] = _C._are_functorch_transforms_active
    closure["_ft_entry"] = record.functorch_entry
    return ["    if _ft():", f"        return _ft_entry({call_args})"]


def _closure(record: OpRecord, plan: CallPlan) -> dict[str, Any]:
    assert record.op is not None
    closure: dict[str, Any] = {
        # The OpOverload's own C callable: what OpOverload.__call__ calls, one frame less.
        "_op": record.op._op,
        "_seq": (list, tuple),
        "_number": frozenset({int, float, bool}),
        "_dtype": torch.dtype,
        "_device": torch.device,
        "_layout": torch.layout,
        "_memory_format": torch.memory_format,
        "_tfm": _C._is_torch_function_mode_enabled,
        "_included_set": _C._dispatch_tls_local_include_set,
        "_included_ok": _pyguard.INCLUDED_OK,
        "_excluded_set": _C._dispatch_tls_local_exclude_set,
        "_bad_excluded": _pyguard.BAD_EXCLUDED,
        "_excluded": _C._dispatch_tls_is_dispatch_key_excluded,
        "_ADIV": _C.DispatchKey.ADInplaceOrView,
        "_profiling": _C._autograd._profiler_enabled,
        "_fw": _forward_ad,
        "_grad": _C.is_grad_enabled,
        "_autocast": _C._is_any_autocast_enabled,
        "_Call": _Call,
        "_apply": _c_apply(record.autograd_function),
        "_bump": _C._increment_version,
    }
    for d, k in plan.kernels.items():
        closure[f"_k_{d}"] = k.checked
    for d, fn_cls in record.fast_functions.items():
        closure[f"_apply_{d}"] = _c_apply(fn_cls)
    for d, k in plan.kernels.items():
        closure[f"_u_{d}"] = k.user
        closure[f"_where_{d}"] = k.where
    if _cheap_alias(record):
        closure["_fresh"] = output_is_fresh()
        closure["_check_outputs"] = check_outputs
    closure["_convert"] = converter(record.schema)
    closure["_T"] = torch.Tensor
    return closure


def _cheap_alias(record: OpRecord) -> bool:
    """Ops promising fresh outputs: the fast path calls the user's kernel and checks outputs inline."""
    return len(record.schema.returns) > 0 and not record.is_inplace and not record.is_out


class _Generator:
    """Lines of the guarded call function, for either guard."""

    def __init__(self, record: OpRecord, params: list[_Param], closure: dict[str, Any]) -> None:
        self.record = record
        self.params = params
        assert record.plan is not None
        self.plan = record.plan
        self.kernels = record.plan.kernels
        self.closure = closure
        self.positional = [p.name for p in params if not p.kwarg_only]
        self.keywords = [p.name for p in params if p.kwarg_only]
        self.call_args = ", ".join(self.positional + [f"{k}={k}" for k in self.keywords])
        # Outputs that are not fresh (an input returned, a view, a shared storage, a tuple) get
        # the full aliasing check.
        self.fresh = "not _fresh(_out)"
        self.apply_args = ", ".join(self.positional + self.keywords)

    def signature(self) -> str:
        parts: list[str] = []
        star = False
        for p in self.record.signature.parameters.values():
            if p.kind is p.KEYWORD_ONLY and not star:
                parts.append("*")
                star = True
            if p.default is not p.empty:
                self.closure[f"_default_{p.name}"] = p.default
                parts.append(f"{p.name}=_default_{p.name}")
            else:
                parts.append(p.name)
        return ", ".join(parts)

    def _list_conversions(self, ind: str) -> list[str]:
        # The dispatcher hands kernels lists; callers may pass tuples (and list defaults are tuples).
        lines = []
        for p in self.params:
            if p.jit.startswith(("List[", "Optional[List[")):
                lines += [f"{ind}if type({p.name}) is tuple:", f"{ind}    {p.name} = list({p.name})"]
        return lines

    def native(self, native: Any, tensors: list[_Param], lists: list[_Param], value_guards: list[str]) -> list[str]:
        """One C call classifies every Tensor argument and the thread-local state."""
        spec = "".join(_native.spec_letter(p.jit) for p in tensors + lists)
        self.closure["_guard"] = native.guard
        self.closure["_spec"] = spec.encode()
        conditions = ["_g"] + value_guards
        if self.plan.autocast:
            conditions.append("not _autocast()")
        ind = "        "
        lines = [f"    _g = _guard(_spec, {', '.join(p.name for p in tensors + lists)})", f"    if {' and '.join(conditions)}:"]
        lines += self._list_conversions(ind)
        for d in self.kernels:
            code = 1 if d == "cpu" else 2
            lines.append(f"{ind}if _g == {code}:")
            lines += self._kernel_call(d, ind + "    ")
            lines.append(f"{ind}if _g == {code | 4}:")
            lines += self._grad_lines(d, ind + "    ")
        return lines

    def python(self, value_guards: list[str]) -> list[str]:
        """An op without Tensor arguments (a ``Device`` argument picks the device): the exact
        thread-local checks, the argument types, then the device's kernel."""
        guard = (
            "_tfm() or _included_set().raw_repr() not in _included_ok or _excluded_set().raw_repr() & _bad_excluded"
            " or _profiling() or _fw._current_level >= 0"
        )
        if self.plan.autocast:
            guard += " or _autocast()"
        lines = [f"    if not ({guard}):"]
        ind = "        "
        if value_guards:
            lines.append(f"{ind}if {' and '.join(value_guards)}:")
            ind += "    "
        lines += self._list_conversions(ind)
        device = next(p for p in self.params if p.jit == "Device")
        keyword = "if"
        for d in self.kernels:
            lines.append(f"{ind}{keyword} {device.name}.type == '{d}':")
            keyword = "elif"
            lines += self._kernel_call(d, ind + "    ")
        return lines

    def cached(self, tensors: list[_Param], lists: list[_Param], value_guards: list[str]) -> list[str]:
        """The Python guard: thread-local checks on every call, then one C call that compares
        every Tensor with a recorded plain call of the op (see :mod:`opclass._pyguard`)."""
        closure = self.closure
        closure.update(
            {
                "_s": _pyguard.Slots(),
                "_miss": _pyguard.miss,
                "_devices": frozenset(self.kernels),
                "_NT": _pyguard.NO_TENSOR,
                **INLINE_NAMES,
            }
        )
        # What the recorded key sets cannot show, each with what it cost here (docs/performance.md):
        # TorchFunctionMode 25 ns, profiler 27 ns, forward-AD level 20 ns, a dispatch mode 28 ns,
        # jit tracing 25 ns, the Python dispatcher 70 ns. (Reading the included keys whole: 0.19 us.)
        closure.update({"_modes": _C._len_torch_dispatch_stack, "_tracing": _C._is_tracing, "_included": _C._dispatch_tls_is_dispatch_key_included, "_PD": _C.DispatchKey.PythonDispatcher})
        guard = "_tfm() or _profiling() or _fw._current_level >= 0 or _modes() or _tracing() or _included(_PD)"
        if self.plan.autocast:
            guard += " or _autocast()"  # else a miss under autocast would record it as plain
        lines = [f"    if not ({guard}):"]
        ind = "        "
        guards = [f"type({p.name}) in _seq" for p in lists] + value_guards
        if guards:
            lines.append(f"{ind}if {' and '.join(guards)}:")
            ind += "    "
        flat = []
        for p in self.params:
            if p.tensor:
                flat.append(f"(_NT if {p.name} is None else {p.name})" if p.optional else p.name)
            elif p.tensor_list:
                flat.append(f"*[_NT if _x is None else _x for _x in {p.name}]" if "Optional" in p.jit else f"*{p.name}")
        values = ", ".join(flat)
        values_tuple = f"({values},)"
        if lists:
            # A list of another length than recorded: TensorGuards raises TypeError (a miss).
            lines += [f"{ind}_t = {values_tuple}", f"{ind}try:", f"{ind}    _e = _s[0]", f"{ind}    if not _e[0](*_t):",
                      f"{ind}        _e = _s[1]", f"{ind}        if not _e[0](*_t):", f"{ind}            _e = (None, _miss(_s, _t, _devices))",
                      f"{ind}except TypeError:", f"{ind}    _e = (None, _miss(_s, _t, _devices))"]
        else:
            lines += [f"{ind}_e = _s[0]", f"{ind}if not _e[0]({values}):", f"{ind}    _e = _s[1]", f"{ind}    if not _e[0]({values}):",
                      f"{ind}        _e = (None, _miss(_s, {values_tuple}, _devices))"]
        lines += [f"{ind}_c = _e[1]", f"{ind}if _c:"]
        ind += "    "
        lines += self._list_conversions(ind)
        devices = list(self.kernels)
        lines.append(f"{ind}if _c & 4 and _grad():")
        for i, d in enumerate(devices):
            code = 1 if d == "cpu" else 2
            if i + 1 < len(devices):
                lines.append(f"{ind}    if _c & {code}:")
                lines += self._grad_lines(d, ind + "        ")
            else:
                lines += self._grad_lines(d, ind + "    ")
        for i, d in enumerate(devices):
            code = 1 if d == "cpu" else 2
            if i + 1 < len(devices):
                lines.append(f"{ind}if _c & {code}:")
                lines += self._kernel_call(d, ind + "    ", bump="_c & 8", inline_fresh=True)
            else:
                lines += self._kernel_call(d, ind, bump="_c & 8", inline_fresh=True)
        return lines

    def _grad_lines(self, device: str, ind: str) -> list[str]:
        if self.plan.grad == "eager":
            # Differentiate through the kernel: call it with autograd on, as the Autograd kernel does.
            return self._kernel_call(device, ind, differentiable=True)
        return [f"{ind}return {self._grad_call(device)}"]

    def _grad_call(self, device: str) -> str:
        if self.plan.grad == "dispatcher":
            # Autograd through a mutation, or out= under grad: the dispatcher decides (or raises).
            return f"_op({self.call_args})"
        if device in self.record.fast_functions:
            return f"_apply_{device}({self.apply_args})"
        return f"_apply({self.apply_args}, _Call(None, {len(self.positional)}, {tuple(self.keywords)!r}, _k_{device}))"

    def _kernel_call(self, device: str, ind: str, differentiable: bool = False, bump: str = "not _excluded(_ADIV)", inline_fresh: bool = False) -> list[str]:
        """Call the kernel, check outputs, bump versions of mutated arguments, convert, return."""
        record = self.record
        lines = []
        if differentiable:
            self.closure["_check_differentiable"] = check_differentiable
        single = len(record.schema.returns) == 1 and str(record.schema.returns[0].real_type) == "Tensor"
        exact = exact_check(record.schema, "_out")
        # What the dispatcher would make of the result (a tuple, Python numbers) or its error,
        # then the output checks; before the version bump, as on every dispatcher path.
        convert = f"_out = _convert(_where_{device}, _out)"
        if _cheap_alias(record):
            lines.append(f"{ind}_out = _u_{device}({self.call_args})")
            args = ", ".join(self.positional) + ("," if len(self.positional) == 1 else "")
            kwargs = ", ".join(f"{k!r}: {k}" for k in self.keywords)
            check = f"_check_outputs(_where_{device}, {len(record.schema.returns)}, ({args}), {{{kwargs}}}, _out)"
            if single:
                # fresh implies the exact type, so the common case costs one test.
                # Fresh: a plain Tensor only this frame holds, whose storage nothing else uses
                # (so no input, view or detached alias); refcount 2 = _out and getrefcount's argument.
                if inline_fresh:
                    # The test can raise for an output without storage: then it is not fresh.
                    lines += [f"{ind}try:", f"{ind}    _f = {INLINE_TEST}", f"{ind}except Exception:", f"{ind}    _f = False"]
                fresh = "not _f" if inline_fresh else self.fresh
                lines += [f"{ind}if {fresh}:", f"{ind}    if type(_out) is not _T:", f"{ind}        {convert}", f"{ind}    {check}"]
            else:
                lines += [f"{ind}if not ({exact or 'False'}):", f"{ind}    {convert}", f"{ind}{check}"]
        elif not record.schema.returns:
            # The user's kernel itself (no wrapper frame): only a result other than None is wrong.
            lines += [f"{ind}_out = _u_{device}({self.call_args})", f"{ind}if _out is not None:", f"{ind}    {convert}"]
        else:
            lines.append(f"{ind}_out = _k_{device}({self.call_args})")  # checked and converted
        if differentiable:
            lines.append(f"{ind}_check_differentiable(_where_{device}, _out)")
        if record.mutated:
            mutated = [record.schema.arguments[i] for i in record.mutated]
            names = ", ".join(a.name for a in mutated) + ("," if len(mutated) == 1 else "")
            # After the kernel, as on the dispatcher path; _bump skips inference tensors.
            lines.append(f"{ind}if {bump}:")
            if all(str(a.real_type) == "Tensor" for a in mutated):
                lines.append(f"{ind}    _bump(({names}))")
            else:
                lines.append(f"{ind}    _bump([_t for _v in ({names}) for _t in (_v if type(_v) is list else (_v,)) if _t is not None])")
        lines.append(f"{ind}return _out")
        return lines


def _c_apply(fn_cls: type[torch.autograd.Function] | None) -> Callable[..., Any]:
    """The Function's C-level ``apply`` (skips Python ``Function.apply``'s functorch handling,
    which the guards already ruled out); the Python one for Tensor-list ops, which needs it."""
    assert fn_cls is not None
    # Typed locals: torch's stubs give these as Any in some releases and not in others.
    apply: Callable[..., Any]
    if "apply" in vars(fn_cls) and not isinstance(vars(fn_cls)["apply"], classmethod):
        apply = fn_cls.apply  # supports_tensorlist's wrapper
    else:
        apply = _C._FunctionBase.__dict__["apply"].__get__(None, fn_cls)
    return apply
