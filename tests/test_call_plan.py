"""The call plan: one decision per install, from what the op registered, read by every fast route.

The three divergences that motivated it are tests here, each checked three ways where the native
guard is loaded (the class call, the Python guard's call function, ``MyOp.op``) through
:func:`opclass._harness.call_paths`; under ``OPCLASS_GUARD=python`` the same file runs two ways
(``test_fastpath_equivalence.test_matrix_under_the_other_guard`` covers the corpus there).
Last, defaults: every path gives the kernel the same defaults, and a kernel whose own defaults
differ from the schema's turns the fast path off.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp, Hook
from opclass.callpath.classcall import call_function
from opclass._harness import call_paths, diff, observe

from _paths import assert_paths_agree, assert_paths_agree_on

def test_three_paths_where_the_native_guard_is_loaded(ns: str) -> None:
    class Plain(CustomOp, name=f"{ns}::plain"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

    labels = list(call_paths(Plain))
    expected = ["Plain(...)", "Plain(...) [Python guard]", "Plain.op(...)"] if opclass.guard_backend() == "native" else ["Plain(...)", "Plain.op(...)"]
    assert labels == expected


def test_the_comparator_sees_result_types() -> None:
    """A Tensor where the dispatcher gives a float is a difference, not an equal value."""
    as_tensor = observe(lambda: torch.tensor(3.0), (), {})
    as_float = observe(lambda: 3.0, (), {})
    assert diff(as_tensor, as_float) is not None
    assert diff(observe(lambda: (1,), (), {}), observe(lambda: [1], (), {})) is not None


# --------------------------------------------------------------------------- 1. result conversion

# Kernels whose results are converted (or rejected) by the dispatcher: annotation, kernel body.
_RESULTS: dict[str, tuple[str, Callable[[Tensor], Any]]] = {
    "float_from_tensor": ("float", lambda x: x.sum()),
    "int_from_tensor": ("int", lambda x: x.sum().long()),
    "bool_from_tensor": ("bool", lambda x: (x.sum() > 0)),
    "list_from_tensor": ("list[Tensor]", lambda x: x + 1),
    "pair_from_tensor": ("tuple[Tensor, Tensor]", lambda x: x + 1),
    "none_from_tensor": ("None", lambda x: x + 1),
    "tensor_from_list": ("Tensor", lambda x: [x + 1]),
    "tensor_from_float": ("Tensor", lambda x: 2.0),
    "pair_from_list": ("tuple[Tensor, Tensor]", lambda x: [x + 1, x + 2]),
    "float_from_int": ("float", lambda x: 3),
}


def _result_op(ns: str, case: str) -> Any:
    annotation, body = _RESULTS[case]
    scope: dict[str, Any] = {"CustomOp": CustomOp, "Tensor": Tensor, "body": body}
    exec(  # noqa: S102 - the annotation is the subject of the test
        f"class Result(CustomOp, name='{ns}::{case}'):\n"
        f"    @staticmethod\n"
        f"    def cpu(x: Tensor) -> {annotation}:\n"
        f"        return body(x)\n",
        scope,
    )
    return scope["Result"]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("case", list(_RESULTS))
def test_result_is_what_the_dispatcher_makes_of_it(ns: str, case: str, requires_grad: bool) -> None:
    op = _result_op(ns, case)
    seen = assert_paths_agree(op, lambda: ((torch.ones(3, requires_grad=requires_grad),), {}))
    if case == "float_from_tensor":
        assert seen["Result(...)"]["output"] == 3.0  # not tensor(3.)


def test_result_type_does_not_change_with_requires_grad(ns: str) -> None:
    op = _result_op(ns, "float_from_tensor")
    assert type(op(torch.ones(3))) is float
    assert type(op(torch.ones(3, requires_grad=True))) is float


def test_c_entry_finishes_every_result_that_is_not_one_tensor(ns: str) -> None:
    op, single = _result_op(ns, "float_from_tensor"), _result_op(ns, "tensor_from_list")
    call_function(op), call_function(single)  # the class call (and its C entry) is built on the first call
    if op._opclass_fast is None:
        pytest.skip("no native C entry under this guard")
    assert op._opclass_fast[1] is False  # not one Tensor: the C entry finishes every result
    assert single._opclass_fast[1] is True


# --------------------------------------------------------------------------- 2. third-party registrations


@pytest.fixture
def hook_at() -> Iterator[Callable[[str, str, Callable[..., Any]], None]]:
    """Register a third-party hook ``name`` whose installer puts ``kernel`` at dispatch ``key``."""
    names: list[str] = []

    def register(name: str, key: str, make: Callable[..., Any]) -> None:
        def install(record: Any, value: Any) -> None:
            record.lib.impl(record.overload_name(), make(record), key, with_keyset=True)

        opclass.register_hook(Hook(name, install, staticmethod=False))
        names.append(name)

    yield register
    for name in names:
        opclass.unregister_hook(name)


def _op_with(ns: str, name: str, hook: str, kernel: str = "cpu") -> Any:
    """The op ``x + 1`` (class ``name.title()``) whose class sets ``hook = True``."""

    def add_one(x: Tensor) -> Tensor:
        return x + 1

    return type(CustomOp)(name.title(), (CustomOp,), {hook: True, kernel: staticmethod(add_one)}, name=f"{ns}::{name}")


def _to_bfloat16(record: Any) -> Callable[..., Any]:
    excluded = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def autocast_kernel(keyset: Any, x: Tensor) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(excluded):
            return record.op(x.to(torch.bfloat16))

    return autocast_kernel


def test_third_party_autocast_kernel_is_honoured(ns: str, hook_at: Any) -> None:
    hook_at("my_autocast", "AutocastCPU", _to_bfloat16)

    Twice = _op_with(ns, "twice", "my_autocast")
    assert Twice.record.plan.autocast_devices == ("cpu",)
    assert Twice.record.plan.off is None  # still fast outside autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert Twice(torch.ones(3)).dtype == torch.bfloat16
    seen = assert_paths_agree(Twice, lambda: ((torch.ones(3),), {}), lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    assert seen["Twice(...)"]["output"]["dtype"] == torch.bfloat16
    assert_paths_agree(Twice, lambda: ((torch.ones(3, requires_grad=True),), {}))


def _doubling(after: Any) -> Callable[..., Any]:
    def make(record: Any) -> Callable[..., Any]:
        def doubling_kernel(keyset: Any, *args: Any) -> Any:
            with torch._C._AutoDispatchBelowAutograd():
                return record.op.redispatch(keyset & after, *args) * 2

        return doubling_kernel

    return make


_ODD_KERNELS = {
    "AutogradCPU": _doubling(torch._C._after_autograd_keyset),
    "ADInplaceOrView": _doubling(torch._C._after_ADInplaceOrView_keyset),
    "CompositeExplicitAutogradNonFunctional": lambda record: lambda keyset, x: x * 10,
}


@pytest.mark.parametrize("key", ["AutogradCPU", "ADInplaceOrView", "CompositeExplicitAutogradNonFunctional"])
def test_kernel_at_a_key_the_plan_does_not_know_turns_the_fast_path_off(ns: str, hook_at: Any, key: str) -> None:
    hook_at("odd_key", key, _ODD_KERNELS[key])

    Odd = _op_with(ns, "odd", "odd_key")
    plan = Odd.record.plan
    assert plan.off == f"hook 'odd_key' registered a kernel at {key}"
    assert not plan.kernels  # the Autograd kernel's shortcut is off too
    assert f"fast path off: hook 'odd_key' registered a kernel at {key}" in repr(Odd.record)
    assert list(call_paths(Odd)) == ["Odd(...)", "Odd.op(...)"]
    assert Odd._opclass_fast is None
    for requires_grad in (False, True):
        assert_paths_agree(Odd, lambda: ((torch.ones(3, requires_grad=requires_grad),), {}))


def test_backend_kernel_replaced_by_a_hook_leaves_that_device_to_the_dispatcher(ns: str, hook_at: Any) -> None:
    hook_at("other_cpu", "CPU", lambda record: lambda keyset, x: x * 100)

    Replaced = _op_with(ns, "replaced", "other_cpu", kernel="default")
    plan = Replaced.record.plan
    assert "cpu" not in plan.kernels and "cuda" in plan.kernels  # cuda still runs default
    assert "cpu runs the kernel hook 'other_cpu' registered at CPU" in str(plan)
    seen = assert_paths_agree(Replaced, lambda: ((torch.ones(2),), {}))
    assert seen["Replaced(...)"]["output"]["values"].tolist() == [100.0, 100.0]


@pytest.mark.parametrize("key", ["Meta", "FuncTorchBatched", "XLA", "AutocastXPU"])
def test_kernel_at_an_unreachable_key_keeps_the_fast_path(ns: str, hook_at: Any, key: str) -> None:
    hook_at("elsewhere", key, lambda record: lambda keyset, *args: None)

    Elsewhere = _op_with(ns, "elsewhere", "elsewhere")
    plan = Elsewhere.record.plan
    assert plan.off is None and list(plan.kernels) == ["cpu"] and plan.autocast_devices == ()
    assert_paths_agree(Elsewhere, lambda: ((torch.ones(2),), {}))


def test_builtin_autocast_hook_is_planned_from_its_registration(ns: str) -> None:
    class Mm(CustomOp, name=f"{ns}::mm"):
        autocast = {"cpu": torch.bfloat16}

        @staticmethod
        def cpu(a: Tensor, b: Tensor) -> Tensor:
            return a @ b

    assert Mm.record.plan.autocast_devices == ("cpu",)
    assert Mm.record.kernel_for("cpu").where == f"{ns}::mm (Mm.cpu)"
    assert Mm.record.kernel_for("cuda") is None


# --------------------------------------------------------------------------- 3. mutation under autograd


def _scale_(ns: str) -> Any:
    class Scale_(CustomOp, name=f"{ns}::scale_", mutates_args=("b",)):
        @staticmethod
        def cpu(b: Tensor) -> None:
            b.mul_(2)

    return Scale_


def test_changing_a_tensor_with_autograd_history_raises_naming_the_op(ns: str) -> None:
    """Its gradients would silently stay those of its value before the write: the call raises and
    puts the values back."""
    op = _scale_(ns)

    def make() -> tuple[tuple[Any, ...], dict[str, Any]]:
        a = torch.ones(3, requires_grad=True)
        return ((a * 2),), {}

    seen = assert_paths_agree(op, make)
    kind, message = seen["Scale_.op(...)"]["exception"]
    assert kind == "RuntimeError"
    assert f"{ns}::scale_ (Scale_): the op writes to 'b', which requires grad and has autograd history, and the kernel changed its values, which are put back" in message
    assert "b.detach()" in message and "Scale_.setup_context and Scale_.backward" in message
    # The values are as before the call; the version counter says they were written (a backward
    # that saved b raises, as it should: autograd cannot tell that the values came back).
    after = seen["Scale_(...)"]["inputs_after"][0]
    assert after["values"].tolist() == [2.0] * 3
    assert after["version"] > 0


def test_a_kernel_that_leaves_a_tensor_with_history_unchanged_runs(ns: str) -> None:
    """Declared written but left as it was (a logger): no gradient can go wrong, so it runs."""

    class Peek(CustomOp, name=f"{ns}::peek", mutates_args=("b",)):
        @staticmethod
        def cpu(b: Tensor) -> Tensor:
            return b.sum().detach()

    seen = assert_paths_agree(Peek, lambda: ((torch.ones(3, requires_grad=True) * 2,), {}))
    assert seen["Peek(...)"].get("exception") is None and seen["Peek(...)"]["output"] is not None


def test_writing_a_leaf_that_requires_grad_runs_as_under_no_grad(ns: str) -> None:
    """A leaf (an nn.Parameter) has no history to keep: the write runs, as custom_op's does, and
    the version counter makes a backward that saved the old value raise."""
    op = _scale_(ns)
    seen = assert_paths_agree(op, lambda: ((torch.ones(3, requires_grad=True),), {}))
    after = seen["Scale_(...)"]["inputs_after"][0]
    assert seen["Scale_(...)"].get("exception") is None
    assert after["values"].tolist() == [2.0] * 3 and after["version"] > 0
    w = torch.nn.Parameter(torch.ones(3))
    y = w * w  # saves w
    op(w)
    assert w.tolist() == [2.0] * 3 and w.grad_fn is None
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    z = w * 3  # a later use: the gradient is the leaf's own
    z.sum().backward()
    assert w.grad is not None and w.grad.tolist() == [3.0] * 3


def test_gradients_stay_right_when_the_mutated_tensor_needs_no_grad(ns: str) -> None:
    op = _scale_(ns)
    a = torch.ones(3, requires_grad=True)
    b = (a * 2).detach()
    op(b)
    assert b.tolist() == [4.0] * 3
    with torch.no_grad():
        c = a * 2
        op(c)  # no_grad: nothing to record, as for torch's own in-place ops
    assert c.tolist() == [4.0] * 3
    assert_paths_agree(op, lambda: ((torch.ones(3),), {}))


def test_mutating_op_with_other_inputs_requiring_grad(ns: str) -> None:
    class AddInto(CustomOp, name=f"{ns}::add_into", mutates_args=("out",)):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.add_(x.detach())

    assert_paths_agree(AddInto, lambda: ((torch.ones(3, requires_grad=True), torch.zeros(3)), {}))
    assert_paths_agree(AddInto, lambda: ((torch.ones(3), torch.zeros(3, requires_grad=True) * 1), {}))


# --------------------------------------------------------------------------- installs


def test_redefinition_builds_a_fresh_install(ns: str) -> None:
    def define(k: float) -> Any:
        class Mul(CustomOp, name=f"{ns}::mul"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x * k

        return Mul

    first = define(2.0)
    old = first.record
    second = define(3.0)
    new = second.record
    assert new is not old and new.spec is not old.spec
    assert old.lib is None and not old.live
    assert new.live and new.plan is not None and new.plan.kernels["cpu"].user(torch.ones(1)).item() == 3.0
    assert first(torch.ones(1)).item() == 3.0  # the replaced class runs the live op


def test_kernel_registered_outside_the_ops_library_is_planned(ns: str) -> None:
    """A hook that registers through a Library of its own is seen through the dispatcher."""
    libs = []

    def install(record: Any, value: Any) -> None:
        lib = torch.library.Library(record.namespace, "FRAGMENT")
        libs.append(lib)
        lib.impl(record.overload_name(), _ODD_KERNELS["AutogradCPU"](record), "AutogradCPU", with_keyset=True)
        lib.impl(record.overload_name(), _to_bfloat16(record), "AutocastCPU", with_keyset=True)

    opclass.register_hook(Hook("own_library", install, staticmethod=False))
    try:

        Own = _op_with(ns, "own", "own_library")
        assert Own.record.plan.off == "another Library registered a kernel at AutogradCPU"
        assert Own.record.plan.autocast_devices == ("cpu",)
        assert_paths_agree(Own, lambda: ((torch.ones(3),), {}))
    finally:
        opclass.unregister_hook("own_library")
        opclass.remove(f"{ns}::own")
        for lib in libs:
            lib._destroy()


# --------------------------------------------------------------------------- defaults: the kernel's own


def test_kernel_sees_the_same_defaults_on_every_path(ns: str) -> None:
    """The dispatcher leaves out arguments equal to their default, so the kernel's own default
    applies; an op whose kernel defaults differ from the schema's has no fast path."""
    seen: list[Any] = []

    class Where(CustomOp, name=f"{ns}::where"):
        @staticmethod
        def cpu(x: Tensor, device: torch.device = "cpu") -> Tensor:  # type: ignore[assignment]
            seen.append(device)
            return x.clone()

    for fn in call_paths(Where).values():
        fn(torch.ones(1))
        fn(torch.ones(1), torch.device("cpu"))  # equal to the default: left out as well
    assert seen == ["cpu"] * 2 * len(call_paths(Where))
    assert Where.record.plan.off == f"{ns}::where (Where.cpu) has default 'cpu' for 'device' where the schema's is device(type='cpu')"


def test_matching_defaults_keep_the_fast_path(ns: str) -> None:
    class Same(CustomOp, name=f"{ns}::same"):
        @staticmethod
        def cpu(x: Tensor, k: float = 2.0, sizes: list[int] = [1, 2], dtype: torch.dtype = torch.float32) -> Tensor:  # noqa: B006
            return x * k

    assert Same.record.plan.off is None
    assert_paths_agree_on(Same, torch.ones(2))
