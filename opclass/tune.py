"""Tuning an op's providers: measuring which one runs each bucket of calls fastest
(:func:`tune_providers`), and using such tables process-wide (:func:`load_tuning`). The tables
themselves, their buckets and their file: :mod:`opclass.install.tuning`; the choice that reads
them: :mod:`opclass.install.table`.

Example: in :func:`load_tuning`.
"""

from __future__ import annotations

import os
import statistics
import warnings
from typing import Any, Iterable, Mapping, Sequence

import torch

from opclass._samples import samples_of
from opclass.builtin_hooks import debug
from opclass.install import orders as state
from opclass.install import record as records
from opclass.install.tuning import Bucket, Tuning, bucket_function, bucket_text, device_name, midpoints, read, refusal, source_hash
from opclass.providers import live_record, refresh_all, explain_providers

__all__ = ["tune_providers", "load_tuning", "Tuning"]


def tune_providers(
    op: Any, samples: Iterable[Any] | None = None, *, sizes: Sequence[int] | None = None, min_run_time: float = 0.2, show: bool = True
) -> Tuning:
    """Time every available provider of ``op`` on the samples it accepts (``opclass.testing.Sample``
    or tuples of arguments; default: the op's ``samples()``), print a table per bucket (µs per call
    on each sample), and return the :class:`~opclass.Tuning`: per bucket of the samples (the dtype
    of a call's first floating Tensor, the size class of its largest Tensor among the boundaries
    ``sizes``, by default the geometric midpoints between the samples' sizes), the provider that
    runs its samples fastest (of those that run every one of them, alone in the order). Rounds of
    measurement repeat until two in a row agree on every bucket's winner (5 at most); ``spread``
    says how much a provider's medians differed across them. ``.save(path)`` keeps it for
    :func:`load_tuning` or ``OPCLASS_TUNING``. ``.order``: the providers fastest first (by their
    mean speed-up over ``default`` on the samples each accepts), an order for
    :func:`set_provider_order` or ``OPCLASS_PROVIDERS``. The table is for the samples' device type
    (with samples on an accelerator and on the CPU, the accelerator's: the others count for
    ``.order`` only).

    Example:
        >>> import torch, opclass
        >>> class DocsTune(opclass.CustomOp, name="docs_tune::twice"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return x * 2
        ...     add = opclass.provider("cpu")(staticmethod(lambda x: x + x))
        >>> tuned = opclass.tune_providers(DocsTune, [(torch.ones(8),), (torch.ones(4096),)], min_run_time=0.01, show=False)
        >>> sorted(tuned.order), tuned.sizes, sorted(tuned.choices)
        (['add', 'default'], (182,), [(torch.float32, 0), (torch.float32, 1)])
        >>> opclass.remove(DocsTune)
    """
    import torch.utils.benchmark as bench

    record = live_record(op)
    table = record.table
    if not table.has_providers:
        if show:
            print(explain_providers(op))
        return Tuning(record.qualname, device_name("cpu"), "cpu", torch.__version__, {}, (), {}, {}, ())
    found = samples_of(record.owner(), None if samples is None else list(samples))
    full = [record.arguments.complete(s.args, s.kwargs) for s in found]
    devices = [record.arguments.device_of(s.args, s.kwargs) for s in found]
    kind = next((d for d in devices if d not in (None, "cpu")), "cpu")
    numels = {i: max((t.numel() for t in record.arguments.tensors(*full[i])), default=None) for i in range(len(found)) if devices[i] == kind}
    bounds = tuple(sorted(sizes)) if sizes is not None else midpoints(n for n in numels.values() if n is not None)
    bucket_of = bucket_function(bounds, record.arguments)
    buckets = {i: b for i in numels if (b := bucket_of(*full[i][0], **full[i][1])) is not None}
    runs = {}  # sample -> the entries that run it alone in the order, and agree with the reference
    wrong: dict[str, str] = {}
    for i, sample in enumerate(found):
        slot = devices[i] if devices[i] in table.kernels else None
        runs[i] = [e for e in table.entries if table.choice(slot, state.State({table.qualname: (e.name,)})).pick(sample.args, sample.kwargs) is e]
        for e in runs[i]:
            if not e.own and e.name not in wrong:
                problem = debug.disagreement(record, e.where, e.checked, e.options, sample.args, sample.kwargs, "tune_providers compares them on each sample")
                if problem is not None:
                    wrong[e.name] = problem
        runs[i] = [e for e in runs[i] if e.name not in wrong]
    for problem in wrong.values():  # a wrong provider never wins a bucket, however fast
        warnings.warn(f"opclass.tune_providers: left out of the table: {problem}", UserWarning, stacklevel=2)

    def winners(times: Mapping[tuple[str, int], float]) -> dict[Bucket, str]:
        won = {}
        for b in sorted(set(buckets.values()), key=lambda b: (str(b[0]), b[1])):
            mine = [i for i, of in buckets.items() if of == b]
            totals = {e.name: sum(times[e.name, i] for i in mine) for e in table.entries if all((e.name, i) in times for i in mine)}
            if totals:
                won[b] = min(totals, key=totals.__getitem__)
        return won

    rounds: list[dict[tuple[str, int], float]] = []
    won: list[dict[Bucket, str]] = []
    while len(rounds) < (5 if buckets else 1) and (len(won) < 2 or won[-1] != won[-2]):
        timed = {}
        for i, sample in enumerate(found):
            for e in runs[i]:
                timer = bench.Timer("fn(*args, **kwargs)", globals={"fn": e.checked, "args": sample.args, "kwargs": sample.kwargs})
                timed[e.name, i] = timer.blocked_autorange(min_run_time=min_run_time).median * 1e6
        rounds.append(timed)
        won.append(winners(timed))
    times = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    spreads = {key: (max(r[key] for r in rounds) / min(r[key] for r in rounds) - 1) * 100 for key in times}
    per = {e.name: {i: us for (name, i), us in times.items() if name == e.name} for e in table.entries}
    base = per.get("default", {})
    speedup = {name: statistics.geometric_mean([base[i] / us for i, us in ts.items() if i in base] or [1.0]) for name, ts in per.items() if ts}
    # One that declined every sample still serves the arguments it takes: ahead of the first that
    # takes every call (no sample's choice moves), not left out.
    ranked = sorted(speedup, key=lambda name: -speedup[name])
    cut = next((i for i, name in enumerate(ranked) if table.entry(name).options.supports is None), len(ranked))
    order = ranked[:cut] + [name for name, ts in per.items() if not ts and name not in wrong and table.entry(name).available()[0]] + ranked[cut:]
    tuned = Tuning(
        record.qualname, device_name(kind), kind, torch.__version__, {e.name: source_hash(e.raw) for e in table.entries}, bounds,
        won[-1], {name: round(max((spreads[name, i] for i in ts), default=0.0), 1) for name, ts in per.items() if ts}, tuple(order),
    )
    if show:
        _show_tuning(record, tuned, found, buckets, per, spreads, speedup, len(rounds))
    return tuned


def _show_tuning(record: records.OpRecord, tuned: Tuning, found: Sequence[Any], buckets: Mapping[int, Bucket], per: Mapping[str, Mapping[int, float]], spreads: Mapping[tuple[str, int], float], speedup: Mapping[str, float], n_rounds: int) -> None:
    print(f"{record.qualname} on {tuned.device} ({tuned.device_type}), torch {tuned.torch}: us per call, medians of {n_rounds} rounds; size boundaries {list(tuned.sizes)}")
    groups: dict[Bucket | None, list[int]] = {}
    for i in range(len(found)):
        groups.setdefault(buckets.get(i), []).append(i)
    for b, mine in groups.items():
        print(f"  bucket {bucket_text(b)}:" if b is not None else f"  samples in no bucket (not on {tuned.device_type}, or no Tensor): they count for the order only")
        print(f"    {'provider':<16}" + "".join(f"{found[i].name or str(i):>14}" for i in mine) + f"{'spread':>9}")
        for name, ts in per.items():
            if any(i in ts for i in mine):
                cells = "".join(f"{ts[i]:>14.2f}" if i in ts else f"{'declines':>14}" for i in mine)
                spread = max(spreads[name, i] for i in mine if i in ts)
                print(f"    {name:<16}{cells}{spread:>8.1f}%" + ("  <- the table's choice" if b is not None and tuned.choices.get(b) == name else ""))
    print("  order, fastest first (mean speed-up over default): " + ", ".join(f"{n} {speedup[n]:.2f}x" if n in speedup else f"{n} (declines every sample)" for n in tuned.order))


def load_tuning(path: str | os.PathLike[str]) -> list[Tuning]:
    """Use the tuning tables of the file ``path`` (:meth:`Tuning.save` wrote it) process-wide, and
    return them: where an op has one, a call of it runs the provider its table chose for the
    call's bucket, where that one accepts the call and the order in force allows it (else the
    order's choice, as without a table); the reference mode ignores tables. A table measured on
    another device or torch, or on a kernel whose source changed since, is refused with the
    reason: a ``ValueError`` here where the op is defined (nothing is loaded), else a warning when
    it is (and the table is not used). ``OPCLASS_TUNING=path`` loads a file at import, for a
    deployment; its tables come before those loaded here.

    Example:
        >>> import os, tempfile, torch, opclass
        >>> class DocsTuned(opclass.CustomOp, name="docs_tuned::twice"):
        ...     @staticmethod
        ...     def default(x: torch.Tensor) -> torch.Tensor:
        ...         return x * 2
        ...     add = opclass.provider("cpu")(staticmethod(lambda x: x + x))
        >>> path = os.path.join(tempfile.mkdtemp(), "tuning.json")
        >>> opclass.tune_providers(DocsTuned, [(torch.ones(8),)], min_run_time=0.01, show=False).save(path)
        >>> [t.op for t in opclass.load_tuning(path)]
        ['docs_tuned::twice']
        >>> "tuning table: bucket (float32, 0)" in opclass.explain_providers(DocsTuned, torch.ones(8))
        True
        >>> opclass.remove(DocsTuned)
    """
    state.check_env()
    found = read(path)
    with records.LOCK:
        for t in found:
            record = records.lookup(t.op)
            if (why := refusal(t, None if record is None else {e.name: e.raw for e in record.table.entries})) is not None:
                fix = f"opclass.tune_providers({record.cls_name if record else t.op!r}, samples).save(path)"
                raise ValueError(f"opclass.load_tuning: the tuning table of {t.op} in {path} does not fit {'the op defined here' if record else 'this process'}: {why}. Tune it again here: {fix}")
        for t in found:
            state.set_tuned(t.op, t)
            if t.op in state.ENV_STATE.tuned:
                warnings.warn(f"opclass.load_tuning: {state.TUNING_ENV} gives the tuning table of {t.op}, which comes first: this one applies only once that is unset (in a new process)", UserWarning, stacklevel=2)
        refresh_all()
    return found
