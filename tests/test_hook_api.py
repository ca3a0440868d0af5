"""The public hook registry: a third-party ``inverse`` hook, and built-ins going through the same API."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor

import opclass
from opclass import CustomOp, Hook, OpDefinitionError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def inverse_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inverse_hook_example", EXAMPLES / "inverse_hook.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    opclass.unregister_hook("inverse")
    opclass.remove_namespace("ex_inverse")
    del sys.modules[spec.name]


def test_builtin_hooks_are_registry_entries() -> None:
    table = opclass.hooks()
    for name in ("default", "cpu", "cuda", "mps", "xpu", "hpu", "abstract", "setup_context", "backward", "vmap", "autocast", "torch_dispatch"):
        assert isinstance(table[name], Hook), name
    assert table["cpu"].backend and table["cpu"].device_type == "cpu"
    assert table["default"].backend and table["default"].device_type is None
    assert table["abstract"].kernel and not table["abstract"].backend
    assert table["backward"].requires == ("setup_context",)
    assert not table["autocast"].staticmethod


def test_inverse_hook_round_trips(inverse_example: ModuleType) -> None:
    x = torch.randn(5)
    Scale, Shift, inverse = inverse_example.Scale, inverse_example.Shift, inverse_example.inverse
    torch.testing.assert_close(inverse(Scale)(Scale(x, 4.0), 4.0), x)
    torch.testing.assert_close(inverse(Shift)(Shift(x, 2.0), 2.0), x)


def test_inverse_hook_installed_for_new_classes_and_variants(inverse_example: ModuleType, ns: str) -> None:
    class Double(CustomOp, name=f"{ns}::double"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return 2 * x

        @staticmethod
        def inverse(y: Tensor) -> Tensor:
            return y / 2

    class Double2(Double, name=f"{ns}::double2"):  # inherits the inverse
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + x

    x = torch.randn(3)
    torch.testing.assert_close(inverse_example.inverse(Double2)(Double2(x)), x)
    assert Double2.record.hooks["inverse"] is Double.record.hooks["inverse"]


def test_inverse_check_runs_at_class_creation(inverse_example: ModuleType, ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(x: Tensor, factor: float) -> Tensor:
                return x * factor

            @staticmethod
            def inverse(y: Tensor) -> Tensor:
                return y

    message = str(info.value)
    assert "Bad.inverse(y: Tensor) -> Tensor: takes 1 parameters, the op takes 2" in message
    assert "write inverse(y, factor)" in message
    assert not hasattr(getattr(torch.ops, ns), "bad")


def test_registered_hook_enables_near_miss_detection(inverse_example: ModuleType, ns: str) -> None:
    with pytest.raises(OpDefinitionError, match=r"Typo\.invrse\(y\): not a hook; did you mean 'inverse'\?"):

        class Typo(CustomOp, name=f"{ns}::typo"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x.clone()

            @staticmethod
            def invrse(y):  # type: ignore[no-untyped-def]
                return y


def test_hook_must_be_staticmethod(inverse_example: ModuleType, ns: str) -> None:
    with pytest.raises(OpDefinitionError, match="add @staticmethod"):

        class Plain(CustomOp, name=f"{ns}::plain"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x.clone()

            def inverse(y):  # type: ignore[no-untyped-def]
                return y


def test_unregistered_name_is_a_plain_helper(ns: str) -> None:
    seen: list[str] = []
    opclass.register_hook(Hook("tmp_note", lambda record, value: seen.append(record.qualname), staticmethod=False))
    opclass.unregister_hook("tmp_note")

    class WithHelper(CustomOp, name=f"{ns}::with_helper"):
        tmp_note = "just data"

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    assert seen == []
    torch.testing.assert_close(WithHelper(torch.zeros(1)), torch.ones(1))


def test_non_function_hook_gets_value_and_record(ns: str) -> None:
    installed: list[tuple[str, Any]] = []
    checked: list[Any] = []

    def check(value: Any, ctx: opclass.HookContext) -> None:
        checked.append((value, ctx.qualname, str(ctx.schema)))
        if not isinstance(value, int):
            ctx.fail(f"must be an int, got {value!r}", "write priority = 1")

    opclass.register_hook(Hook("priority", lambda record, value: installed.append((record.qualname, value)), check=check, staticmethod=False))
    try:

        class Prio(CustomOp, name=f"{ns}::prio"):
            priority = 3

            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x.clone()

        assert installed == [(f"{ns}::prio", 3)]
        assert checked[0][:2] == (3, f"{ns}::prio")
        with pytest.raises(OpDefinitionError, match=r"BadPrio\.priority: must be an int, got 'high'; write priority = 1"):

            class BadPrio(CustomOp, name=f"{ns}::bad_prio"):
                priority = "high"

                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return x.clone()

        assert len(installed) == 1
    finally:
        opclass.unregister_hook("priority")


def test_register_hook_rejects_private_names() -> None:
    with pytest.raises(ValueError, match="public Python identifier"):
        opclass.register_hook(Hook("_secret", lambda record, value: None))


def test_device_hook_for_unknown_device_type() -> None:
    with pytest.raises(ValueError, match="'tpu' is not a torch device type"):
        opclass.device_hook("tpu")


def test_uninstall_runs_on_removal_redefinition_and_failed_install(ns: str) -> None:
    """A third-party hook that fills a global table takes its entry out again."""
    table: dict[str, Any] = {}

    def install(record: opclass.OpRecord, value: Any) -> None:
        table[record.qualname] = value
        if value == "boom":
            raise RuntimeError("install failed")

    def uninstall(record: opclass.OpRecord, value: Any) -> None:
        assert table.pop(record.qualname) == value

    opclass.register_hook(Hook("docs_registry", install, uninstall=uninstall, staticmethod=False))
    try:

        def define(value: str) -> Any:
            class Tagged(CustomOp, name=f"{ns}::tagged"):
                docs_registry = value

                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return x + 1

            return Tagged

        first = define("first")
        assert table == {f"{ns}::tagged": "first"}
        define("second")  # redefinition: the old op's entry goes first
        assert table == {f"{ns}::tagged": "second"}
        with pytest.raises(RuntimeError, match="install failed"):
            define("boom")  # the half-done install is undone, the previous op put back
        assert table == {f"{ns}::tagged": "second"}
        torch.testing.assert_close(first(torch.zeros(1)), torch.ones(1))
        opclass.remove_namespace(ns)
        assert table == {}
    finally:
        opclass.unregister_hook("docs_registry")


def test_a_restore_installs_the_hooks_the_class_was_validated_with(ns: str) -> None:
    """A failed redefinition puts the old op back with the hooks it was validated with, run
    again, even if one of them has left the registry meanwhile (the registry is not read again)."""
    installed: list[str] = []
    opclass.register_hook(Hook("docs_audit", lambda record, value: installed.append(record.qualname), staticmethod=False))
    try:

        class Audited(CustomOp, name=f"{ns}::audited"):
            docs_audit = True

            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x + 1

    finally:
        opclass.unregister_hook("docs_audit")
    assert installed == [f"{ns}::audited"]

    def fail(record: opclass.OpRecord, value: Any) -> None:
        raise RuntimeError("install failed")

    opclass.register_hook(Hook("docs_fails", fail, staticmethod=False))
    try:
        with pytest.raises(RuntimeError, match="install failed"):

            class Audited(CustomOp, name=f"{ns}::audited"):  # type: ignore[no-redef]  # noqa: F811
                docs_fails = True

                @staticmethod
                def default(x: Tensor) -> Tensor:
                    return x + 3

    finally:
        opclass.unregister_hook("docs_fails")
    # The restored op ran the installer of docs_audit again, though the registry no longer has it.
    assert installed == [f"{ns}::audited"] * 2
    assert "docs_audit" in Audited.record.hooks and Audited.record.live
    torch.testing.assert_close(Audited(torch.zeros(1)), torch.ones(1))


def test_the_registry_is_read_once_per_definition(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Class creation and install read the hook registry once, and use that snapshot throughout."""
    from opclass.define import hookspec

    reads: list[int] = []

    class CountingLock:
        def __enter__(self) -> None:
            reads.append(1)

        def __exit__(self, *exc: Any) -> None:
            return None

    monkeypatch.setattr(hookspec, "_LOCK", CountingLock())

    class Counted(CustomOp, name=f"{ns}::counted"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

        @staticmethod
        def vmap(info: Any, in_dims: Any, x: Tensor) -> Any:
            return x * 2, in_dims[0]

    assert len(reads) == 1
    assert Counted.record.registry == tuple(opclass.hooks().values())
