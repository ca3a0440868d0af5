"""Each kernel adapted to the calling convention of the overload it serves: a kernel written
functional, out-style or in place (``opclass.style``) runs as the functional op, the ``.out``
overload and the ``.inplace`` one. Nothing is copied where the styles match; otherwise the
adapter goes through the functional result: an out-style kernel's buffers are allocated with the
op's fake kernel, an in-place kernel writes clones of its arguments, and a result is copied into
``out`` with torch's ``out=`` rules (an empty ``out`` resized, a non-empty one resized with a
warning, a dtype or device it cannot be cast to refused) or into the written arguments.

Example:
    >>> import torch, opclass
    >>> class DocsAdapted(opclass.CustomOp, name="docs_adapted::double", out=True):
    ...     @staticmethod
    ...     def cpu(x: torch.Tensor) -> torch.Tensor:
    ...         return 2 * x
    >>> buf = torch.empty(0)
    >>> DocsAdapted(torch.ones(2), out=buf) is buf, buf
    (True, tensor([2., 2.]))
    >>> opclass.remove(DocsAdapted)
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from opclass.define.conventions import style_of
from opclass.define.hookspec import Hook
from opclass.errors import definition_error
from opclass.install.fake import register_fake

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

__all__ = ["adapted", "install", "copy_out", "WRITES"]

#: Set on an adapter of a kernel written in its overload's own style: ``(the adapter, that kernel)``
#: (the adapter only returns what it wrote; the C entry returns it itself).
WRITES = "__opclass_writes__"

Kernel = Callable[..., Any]


def adapted(record: OpRecord, hook: Hook, value: Any, base: Callable[[], OpRecord | None]) -> Any:
    """``value`` of ``hook`` as ``record``'s overload runs it: each kernel adapted to the overload's
    convention (``base``: the functional op's live record, whose fake kernel allocates)."""
    if not hook.kernel or not hook.backend:
        return value
    if hook.members:
        return {name: _adapt(record, fn, base) for name, fn in value.items()}
    return _adapt(record, value, base)


def _adapt(record: OpRecord, fn: Kernel, base: Callable[[], OpRecord | None]) -> Kernel:
    have, want = style_of(fn), record.convention.kind
    if have == want == "functional":
        return fn
    conv, table = record.convention, record.arguments
    donated = [(table[n].index if not table[n].keyword_only else None, n) for n in conv.donated]
    outs = conv.outs

    def given(kwargs: Mapping[str, Any]) -> list[Any]:
        """The out buffers, where each is a Tensor (``None`` passes the dispatcher's parsing)."""
        found = [kwargs[n] for n in outs]
        for n, v in zip(outs, found):
            if v is None:
                raise RuntimeError(f"Expected a proper Tensor but got None (or an undefined Tensor in C++) for argument #{table[n].index} {n!r}")
        return found

    def values(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        return [args[i] if i is not None and i < len(args) else kwargs[n] for i, n in donated]

    def shaped(results: list[Any]) -> Any:
        return results[0] if len(results) == 1 else tuple(results)

    def functional(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The kernel's result as the functional op gives it, for any style (no argument written)."""
        if have == "functional":
            return fn(*args, **kwargs)
        if have == "out":
            allocated = _allocator(base)(*args, **kwargs)
            buffers = allocated if isinstance(allocated, tuple) else (allocated,)
            fn(*args, **kwargs, **dict(zip(outs, buffers)))
            return allocated
        positional, kwargs = list(args), dict(kwargs)  # in place: into clones of the arguments it writes
        clones = []
        for i, n in donated:
            if i is not None and i < len(positional):
                positional[i] = positional[i].clone()
                clones.append(positional[i])
            else:
                kwargs[n] = kwargs[n].clone()
                clones.append(kwargs[n])
        fn(*positional, **kwargs)
        return shaped(clones)

    if want == "functional":
        kernel: Kernel = lambda *args, **kwargs: functional(args, kwargs)  # noqa: E731
    elif want == "out" and have == "out" and len(outs) == 1:
        only = outs[0]

        def kernel(*args: Any, **kwargs: Any) -> Any:
            if kwargs[only] is None:
                given(kwargs)
            fn(*args, **kwargs)
            return kwargs[only]

    elif want == "out" and have == "out":

        def kernel(*args: Any, **kwargs: Any) -> Any:
            buffers = given(kwargs)
            fn(*args, **kwargs)
            return tuple(buffers)

    elif want == "out":

        def kernel(*args: Any, **kwargs: Any) -> Any:
            buffers = given(kwargs)
            for n in outs:
                del kwargs[n]
            result = functional(args, kwargs)
            for r, o in zip(result if isinstance(result, tuple) else (result,), buffers):
                copy_out(r, o)
            return shaped(buffers)

    elif have == "inplace":

        def kernel(*args: Any, **kwargs: Any) -> Any:
            fn(*args, **kwargs)
            return shaped(values(args, kwargs))

    else:

        def kernel(*args: Any, **kwargs: Any) -> Any:
            result = functional(args, kwargs)
            written = values(args, kwargs)
            for r, w in zip(result if isinstance(result, tuple) else (result,), written):
                copy_out(r, w, resize=False)
            return shaped(written)

    functools.update_wrapper(kernel, fn)
    kernel.__signature__ = record.signature  # type: ignore[attr-defined]  # checked as the overload's kernel
    kernel.__annotations__ = {}
    if have == want:
        setattr(kernel, WRITES, (kernel, fn))  # the adapter named: a wrapper copying its __dict__ is no such adapter
    return kernel


def install(record: OpRecord, base: Callable[[], OpRecord | None]) -> None:
    """What an overload of a class statement with conventions registers beside its kernels: the
    allocation check, the Functionalize kernel and the ``.out`` overload's fake kernel."""
    _check_allocation(record, base())
    _functionalize(record, base)
    _out_fake(record, base)


def _allocator(base: Callable[[], OpRecord | None]) -> Kernel:
    record = base()
    if record is None or record.fake is None:
        raise RuntimeError("an out-style kernel's functional call needs the op's fake kernel (abstract) to allocate its outputs")
    return record.fake


def _check_allocation(record: OpRecord, base: OpRecord | None) -> None:
    """A functional call of an out-style kernel allocates with the op's own fake kernel (``abstract``):
    refuse the class where it has none (one opclass generates would run the kernel itself)."""
    for hook in record.spec.registry:
        value = record.spec.hooks.get(hook.name)
        if value is None or not hook.kernel or not hook.backend:
            continue
        for name, fn in (value.items() if hook.members else [(hook.name, value)]):
            if style_of(fn) == "out" and record.convention.kind != "out" and (base is None or base.fake_where is None):
                problem = "is written out-style, and the op has no fake kernel of its own to allocate the outputs of a call without out="
                raise definition_error(record.cls_name.partition(".")[0], name, fn, problem, "define abstract (the same arguments, returning torch.empty_like(...) etc.)")


def copy_out(result: torch.Tensor, out: torch.Tensor, resize: bool = True) -> None:
    """``result`` into ``out`` as torch's ``out=`` does (resize, then a checked copy); ``resize=False``:
    into an argument written in place, whose shape must be the result's."""
    from torch._prims_common.wrappers import _maybe_resize_out, _safe_copy_out

    if resize:
        _maybe_resize_out(out, result.shape)
    elif out.shape != result.shape:
        raise RuntimeError(f"output with shape {list(out.shape)} doesn't match the broadcast shape {list(result.shape)}")
    _safe_copy_out(copy_from=result, copy_to=out, exact_dtype=False)


def _functionalize(record: OpRecord, base: Callable[[], OpRecord | None]) -> None:
    """The overload's kernel at the Functionalize key: the functional op, its results then written
    into the out buffers or the written arguments, as torch's own ``out=`` and in-place ops are
    functionalized. torch.compile and torch.export trace the functional op (which decompositions
    and Inductor's ``.out`` lowering then apply to); torch alone would functionalize an
    in-place overload that writes several arguments not at all, nor ``.out`` without ``Tag.out``."""
    kind = record.convention.kind
    if kind == "functional":
        return
    outs = set(record.convention.outs) if kind == "out" else set()
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)

    def functionalized(*args: Any, **kwargs: Any) -> Any:
        functional = base()
        assert functional is not None and functional.op is not None
        inner = torch.utils._pytree.tree_map_only(torch.Tensor, _current, (args, {k: v for k, v in kwargs.items() if k not in outs}))
        with torch._C._ExcludeDispatchKeyGuard(below):
            results = functional.op(*inner[0], **inner[1])
        written = record.outputs.aliased(args, kwargs, tuple)
        for w, r in zip(written, results if isinstance(results, tuple) else (results,)):
            if outs and w.shape != r.shape:
                if not all(type(d) is int for d in r.shape):
                    # Functionalization resizes to static sizes only (torch's own out= lowering does not resize at all).
                    raise RuntimeError(f"{record.qualname}: an out= buffer of shape {list(w.shape)} for an output of shape {list(r.shape)}: traced with symbolic sizes, the buffer must have the output's shape already")
                w.resize_(r.shape)  # as out= resizes
            torch._functionalize_replace(w, r)
            torch._functionalize_commit_update(w)
            torch._functionalize_sync(w)
        return written[0] if len(written) == 1 else written

    record.lib.impl(record.overload_name(), functionalized, "Functionalize")


def _current(t: torch.Tensor) -> torch.Tensor:
    if not torch._is_functional_tensor(t):
        return t
    torch._functionalize_sync(t)
    return torch._from_functional_tensor(t)


def _out_fake(record: OpRecord, base: Callable[[], OpRecord | None]) -> None:
    """The ``.out`` overload's fake kernel: the functional op's, its outputs' shapes given to the
    buffers (resized, as ``out=`` resizes them)."""
    if record.convention.kind != "out":
        return
    outs, aliased = record.convention.outs, record.outputs.aliased

    def fake(*args: Any, **kwargs: Any) -> Any:
        functional = base()
        assert functional is not None and functional.fake is not None
        results = functional.fake(*args, **{k: v for k, v in kwargs.items() if k not in outs})
        for n, r in zip(outs, results if isinstance(results, tuple) else (results,)):
            if kwargs[n].shape != r.shape:
                kwargs[n].resize_(r.shape)
        return aliased(args, kwargs)

    register_fake(record, fake)
