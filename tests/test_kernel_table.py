"""The kernel table: one table of an op's kernels, one registration per dispatch slot, one
compiled choice read by every route; ``use_providers`` blocks that affect only their own context
and the ops they concern; ``check_op`` holding every provider to the reference as if it were the
chosen one."""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp
from opclass._harness import call_paths
from opclass.callpath.source import c_entry
from opclass.install import orders

ROOT = Path(__file__).resolve().parent.parent


def _dispatched() -> bool:
    """Inside a kernel: did the dispatcher's kernel call it (through the output contract's
    wrapper)? The fast paths call it themselves and finish its output after."""
    return sys._getframe(2).f_code.co_filename.endswith(str(Path("install", "outputs.py")))


def make(ns: str, seen: Any) -> Any:
    """``default`` and ``fast`` compute 2x; each appends (its name, called by the dispatcher?) to ``seen``."""

    class Twice(CustomOp, name=f"{ns}::twice"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            seen.append(("default", _dispatched()))
            return x * 2

        setup_context = staticmethod(lambda ctx, inputs, output: None)
        backward = staticmethod(lambda ctx, grad: grad * 2)

        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            seen.append(("fast", _dispatched()))
            return x + x

    return Twice


# --------------------------------------------------------------------------- one table, one choice


def test_each_dispatch_slot_is_registered_once(ns: str) -> None:
    class Many(CustomOp, name=f"{ns}::many"):
        traceable = True

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider("cpu")
        @staticmethod
        def fast(x: Tensor) -> Tensor:
            return x + x

    keys = Counter(r.key for r in Many.record.lib.registrations)
    assert keys["CPU"] == 1 and keys["CompositeExplicitAutograd"] == 1, keys
    assert all(count == 1 for count in keys.values()), keys
    assert [e.name for e in Many.record.table.entries] == ["fast", "cpu", "default"]


def test_only_the_table_module_calls_predicates() -> None:
    # A predicate is called where the choice is made (install/table.py) and nowhere else: the
    # fast paths inline the Choice's candidates (source.py binds them, the C entry calls them).
    calls = []
    for path in (ROOT / "opclass").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"supports\(\*", line) and "``" not in line:
                calls.append(f"{path.relative_to(ROOT)}:{n}")
    assert calls and all(c.startswith("opclass/install/table.py:") for c in calls), calls


def test_the_c_entry_calls_what_the_choice_compiled(ns: str) -> None:
    def float32(x: Tensor) -> bool:
        return x.dtype == torch.float32

    class Chosen(CustomOp, name=f"{ns}::chosen"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x * 2

        @opclass.provider("cpu", supports=float32)
        @staticmethod
        def narrow(x: Tensor) -> Tensor:
            return x + x

    entry = c_entry(Chosen.record)
    if entry is None:
        pytest.skip("no native guard")
    choice = Chosen.record.kernel_for("cpu").choice
    assert choice is not None
    assert entry[2] == (float32, choice.tried[0].fn, choice.tried[1].fn)
    assert [e.name for e in choice.tried] == ["narrow", "default"]


def test_a_predicate_runs_once_per_call_on_every_route(ns: str) -> None:
    calls: list[int] = []

    def never(x: Tensor, k: float) -> bool:
        calls.append(1)
        return False

    def once(x: Tensor, k: float) -> bool:
        calls.append(1)
        return True

    class Picky(CustomOp, name=f"{ns}::picky"):
        @staticmethod
        def default(x: Tensor, k: float = 1.0) -> Tensor:
            return x * k

        no = opclass.provider("cpu", supports=never)(staticmethod(lambda x, k=1.0: x))
        yes = opclass.provider("cpu", supports=once)(staticmethod(lambda x, k=1.0: x * k))

    x = torch.ones(2)
    for label, fn in call_paths(Picky).items():
        for args, kwargs in (((x, 2.0), {}), ((x,), {"k": 2.0}), ((x,), {})):
            calls.clear()
            fn(*args, **kwargs)
            assert len(calls) == 2, (label, args, kwargs, len(calls))  # never, then once: each once
    # Refused: each predicate once, and the error is the same on every route.
    errors = set()
    with opclass.use_providers({Picky: ["no"]}):
        for label, fn in call_paths(Picky).items():
            for args, kwargs in (((x, 2.0), {}), ((x,), {"k": 2.0})):
                calls.clear()
                with pytest.raises(RuntimeError, match="no provider runs this call") as e:
                    fn(*args, **kwargs)
                assert len(calls) == 1, (label, args, kwargs, len(calls))
                errors.add(str(e.value))
    assert len(errors) == 1, errors
    assert "k: 2.0" in errors.pop()


def test_a_mutating_op_refused_bumps_the_version_once(ns: str) -> None:
    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=("x",)):
        @opclass.provider("cpu", supports=lambda x, n: n > 0)
        @staticmethod
        def positive(x: Tensor, n: int) -> None:
            x.fill_(n)

    for fn in call_paths(Fill).values():
        x = torch.zeros(2)
        with pytest.raises(RuntimeError, match="no provider runs this call"):
            fn(x, 0)
        assert x._version == 1


# --------------------------------------------------------------------------- blocks: their own context, their own ops


def test_a_block_in_another_thread_leaves_this_threads_fast_path(ns: str) -> None:
    seen: list[tuple[str, bool]] = []
    op = make(ns, seen)
    x = torch.ones(2)
    opened, done = threading.Event(), threading.Event()
    in_thread: list[tuple[str, bool]] = []

    def hold() -> None:
        with opclass.use_providers({op: ["default"]}):
            opened.set()
            done.wait()
            op(x)
            in_thread.append(seen[-1])

    holder = threading.Thread(target=hold)
    holder.start()
    opened.wait()
    try:
        for label, fn in call_paths(op).items():
            assert torch.equal(fn(x), x * 2)
            assert seen[-1] == ("fast", ".op(" in label), (label, seen[-1])  # the class call: no dispatcher
    finally:
        done.set()
        holder.join()
    assert in_thread == [("default", False)]  # inside its block: the block's choice, fast


def test_inside_a_block_the_ops_it_does_not_name_keep_their_fast_path(ns: str) -> None:
    seen: list[tuple[str, bool]] = []
    named, other = make(ns, seen), make(ns + "_b", seen)
    x = torch.ones(2)
    try:
        with opclass.use_providers({named: ["default"]}):
            for fn in call_paths(named).values():
                fn(x)
                assert seen[-1][0] == "default"
            other(x)
            assert seen[-1] == ("fast", False)
            named(x)
            assert seen[-1] == ("default", False)  # the block's choice, on the fast path
            named(x, **{})
        # Grad: the Function's forward asks the dispatcher's kernel, which reads the block.
        x.requires_grad_()
        with opclass.use_providers({named: ["default"]}):
            named(x).sum().backward()
            assert seen[-1][0] == "default"
        named(x)
        assert seen[-1][0] == "fast"
    finally:
        opclass.remove_namespace(ns + "_b")


def test_a_block_runs_an_op_with_keyword_only_arguments_on_every_route(ns: str) -> None:
    class Scaled(CustomOp, name=f"{ns}::scaled"):
        @staticmethod
        def default(x: Tensor, *, k: float = 1.0) -> Tensor:
            return x * k

        @opclass.provider("cpu", supports=lambda x, k: k > 0)
        @staticmethod
        def positive(x: Tensor, *, k: float = 1.0) -> Tensor:
            return x * k + 100

    x = torch.ones(2)
    for order, added in ((["positive", "default"], 100.0), (["default"], 0.0)):
        with opclass.use_providers({Scaled: order}):
            for label, fn in call_paths(Scaled).items():
                for kwargs in ({"k": 2.0}, {}):
                    got = fn(x, **kwargs)
                    assert torch.equal(got, x * kwargs.get("k", 1.0) + added), (order, label, kwargs)


def test_asyncio_tasks_each_see_their_own_blocks(ns: str) -> None:
    seen: list[tuple[str, bool]] = []
    op = make(ns, seen)
    x = torch.ones(2)

    async def task(order: list[str] | None, ran: list[str]) -> None:
        if order is None:
            for _ in range(3):
                op(x)
                ran.append(seen[-1][0])
                await asyncio.sleep(0)
            return
        with opclass.use_providers({op: order}):
            for _ in range(3):
                op(x)
                ran.append(seen[-1][0])
                await asyncio.sleep(0)

    async def main() -> tuple[list[str], list[str], list[str]]:
        a: list[str] = []
        b: list[str] = []
        c: list[str] = []
        await asyncio.gather(task(["default"], a), task(None, b), task(["fast"], c))
        return a, b, c

    a, b, c = asyncio.run(main())
    assert (a, b, c) == (["default"] * 3, ["fast"] * 3, ["fast"] * 3)


def test_an_order_set_inside_a_block_applies_to_the_block(ns: str) -> None:
    seen: list[tuple[str, bool]] = []
    op = make(ns, seen)
    x = torch.ones(2)
    with opclass.use_providers(batch_invariant=False):
        with opclass.use_providers({op: ["fast", "default"]}):
            op(x)
            assert seen[-1][0] == "fast"
            opclass.set_provider_order(op, ["default"])
            try:
                op(x)
                assert seen[-1][0] == "fast"  # the block's order wins over the process-wide one
            finally:
                opclass.set_provider_order(op, None)
    assert orders.BLOCK.get() is None


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.items: list[tuple[str, bool]] = []

    def append(self, item: tuple[str, bool]) -> None:
        self.items.append(item)

    def __getitem__(self, i: int) -> tuple[str, bool]:
        return self.items[i]


def test_class_call_matches_torch_ops_inside_and_outside_blocks_in_two_threads(ns: str) -> None:
    seen = _PerThread()
    op = make(ns, seen)
    failures: list[str] = []

    def run(order: list[str] | None) -> None:
        for i in range(50):
            x = torch.full((2,), float(i))
            with opclass.use_providers({op: order} if order else None):
                got = [(fn(x), seen[-1][0]) for fn in call_paths(op).values()]
            names = {name for _, name in got}
            if len(names) != 1 or not all(torch.equal(g, x * 2) for g, _ in got) or names != {(order or ["fast"])[0]}:
                failures.append(f"{order}: {names}")

    threads = [threading.Thread(target=run, args=(order,)) for order in (["default"], None)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]


# --------------------------------------------------------------------------- check_op: every provider as the chosen one


def _checked(ns: str, **members: Any) -> Any:
    class Op(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def default(x: Tensor, y: Tensor) -> Tensor:
            return x + y

        @staticmethod
        def abstract(x: Tensor, y: Tensor) -> Tensor:
            return torch.empty_like(x)

        locals().update(members)

    return Op


SAMPLES = [(torch.randn(4, 3), torch.randn(4, 3))]


def test_check_op_catches_an_unpicked_provider_that_writes_an_input(ns: str) -> None:
    def writes(x: Tensor, y: Tensor) -> Tensor:
        y.add_(0.0)
        return x + y

    op = _checked(ns, writes=opclass.provider("cpu")(staticmethod(writes)))
    opclass.set_provider_order(op, ["default", "writes"])  # the picked one is default
    try:
        with pytest.raises(AssertionError, match=r"Op\.writes\) wrote to 'y' \(its version counter moved\)"):
            opclass.testing.check_op(op, SAMPLES)
    finally:
        opclass.set_provider_order(op, None)


def test_check_op_catches_an_unpicked_provider_that_writes_through_numpy(ns: str) -> None:
    def writes(x: Tensor, y: Tensor) -> Tensor:
        np.copyto(y.numpy(), 0.0)
        return x + 0.0

    op = _checked(ns, writes=opclass.provider("cpu", available=lambda: True)(staticmethod(writes)))
    with opclass.use_providers({op: ["default", "writes"]}):
        with pytest.raises(AssertionError, match=r"Op\.writes\) wrote to 'y' \(its values changed"):
            opclass.testing.check_op(op, SAMPLES, opcheck=False)


def test_check_op_catches_an_unpicked_provider_with_other_strides_than_the_fake_kernel(ns: str) -> None:
    def transposed(x: Tensor, y: Tensor) -> Tensor:
        return (x + y).t().contiguous().t()

    op = _checked(ns, transposed=opclass.provider("cpu")(staticmethod(transposed)))
    opclass.set_provider_order(op, ["default", "transposed"])
    try:
        with pytest.raises(AssertionError, match=r"Op\.abstract\): the fake kernel disagrees with .*\(Op\.transposed\): strides"):
            opclass.testing.check_op(op, SAMPLES, opcheck=False)
    finally:
        opclass.set_provider_order(op, None)


def test_check_op_holds_a_provider_beside_a_cpu_kernel_to_that_kernel(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @opclass.provider("cpu")
        @staticmethod
        def off(x: Tensor) -> Tensor:
            return x * 2 + 0.5

    with pytest.raises(AssertionError, match=r"Scale\.off\) disagrees with .*\(Scale\.cpu\)"):
        opclass.testing.check_op(Scale, [(torch.randn(3),)])


def test_check_op_reports_what_it_could_not_check_and_strict_fails(ns: str) -> None:
    def rows(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    op = _checked(
        ns,
        rows=opclass.provider("cpu", batch_invariant=True)(staticmethod(rows)),
        gpu=opclass.provider("cuda")(staticmethod(rows)),
        missing=opclass.provider("cpu", available=lambda: False)(staticmethod(rows)),
    )
    one_row = [(torch.randn(1, 3), torch.randn(1, 3))]
    with pytest.warns(UserWarning, match="could not check"):
        unchecked = opclass.testing.check_op(op, one_row, opcheck=False)
    assert set(unchecked) == {"rows", "gpu", "missing"}, unchecked
    assert "no sample has more than one row" in unchecked["rows"]
    assert unchecked["missing"] == "not available: available() returned False"
    with pytest.raises(AssertionError, match=r"unchecked \(strict=True\): .*Op\.rows\): declared batch_invariant"):
        opclass.testing.check_op(op, one_row, opcheck=False, strict=True)
    # A sample of several rows checks the claim.
    assert "rows" not in opclass.testing.check_op(op, [(torch.randn(4, 3), torch.randn(4, 3))], opcheck=False)
