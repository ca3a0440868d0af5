"""``existing=True``: a class attaches its hooks to an op defined elsewhere (a real C++
``TORCH_LIBRARY`` op, a ``Library("DEF")`` op), and its removal takes away only what it added."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

import opclass
from opclass import CustomOp, OpDefinitionError

from _paths import assert_paths_agree

CPP_NS = "opclass_cpp_test"
# Built once per machine and torch (see cpp_build); load_inline rebuilds when the source changes.
CPP_SOURCE = r"""
#include <torch/library.h>
#include <ATen/ATen.h>

at::Tensor mul2_cpu(const at::Tensor& x) { return x * 2; }

TORCH_LIBRARY(opclass_cpp_test, m) {
  m.def("mul2(Tensor x) -> Tensor");
  m.def("shift(Tensor x, float s=1.) -> Tensor");
}

TORCH_LIBRARY_IMPL(opclass_cpp_test, CPU, m) { m.impl("mul2", mul2_cpu); }
"""


@pytest.fixture(scope="session")
def cpp_build() -> None:
    if shutil.which("c++") is None or shutil.which("ninja") is None:
        pytest.skip("no C++ compiler or ninja to build the C++ test op")
    from torch.utils.cpp_extension import load_inline

    # One build folder per torch build: load_inline's own default is shared by every torch with the
    # same CUDA tag, and its rebuild check ignores the torch version (a .so built for another
    # torch would be loaded). A lock left by a run killed mid-build would make load_inline wait
    # forever; a real build takes seconds, so an old lock is a stale one.
    folder = Path.home() / ".cache" / "opclass" / "cpp-test" / f"torch-{torch.__version__}"
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > 600:
        lock.unlink()
    load_inline(name="opclass_cpp_test_ops", cpp_sources=CPP_SOURCE, functions=None, is_python_module=False, verbose=False, build_directory=str(folder))


@pytest.fixture
def cpp(cpp_build: None) -> Iterator[Any]:
    """The C++ ops' namespace; the classes a test attached are removed after it (a TORCH_LIBRARY
    op itself cannot be removed, so each test must leave it as it found it)."""
    before = torch._C._dispatch_dump(f"{CPP_NS}::mul2"), torch._C._dispatch_dump(f"{CPP_NS}::shift")
    yield getattr(torch.ops, CPP_NS)
    opclass.remove_namespace(CPP_NS)
    assert (torch._C._dispatch_dump(f"{CPP_NS}::mul2"), torch._C._dispatch_dump(f"{CPP_NS}::shift")) == before


@pytest.fixture
def lib(ns: str) -> Iterator[torch.library.Library]:
    """A ``Library(ns, "DEF")`` owning ops defined outside opclass (destroyed after the test)."""
    library = torch.library.Library(ns, "DEF")  # type: ignore[no-untyped-call]
    yield library
    opclass.remove_namespace(ns)
    library._destroy()


def has_kernel(qualname: str, key: str) -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key))


# ---------------------------------------------------------------------- a C++ op


def _mul2_class() -> Any:
    class Mul2(CustomOp, name=f"{CPP_NS}::mul2", existing=True):
        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 2

    return Mul2


@pytest.mark.slow
def test_cpp_op_gets_fake_kernel_and_autograd(cpp: Any) -> None:
    assert not has_kernel(f"{CPP_NS}::mul2", "Meta") and not has_kernel(f"{CPP_NS}::mul2", "Autograd")
    Mul2 = _mul2_class()
    assert Mul2.op is cpp.mul2.default
    assert Mul2.schema == "(Tensor x) -> Tensor" and Mul2.record.existing

    x = torch.arange(3.0, requires_grad=True)
    y = Mul2(x)
    assert torch.equal(y, torch.tensor([0.0, 2.0, 4.0]))
    y.sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full((3,), 2.0))
    assert_paths_agree(Mul2, lambda: ((torch.arange(3.0),), {}))
    assert_paths_agree(Mul2, lambda: ((torch.arange(3.0, requires_grad=True),), {}))

    with FakeTensorMode():
        fake = Mul2(torch.empty(4))
    assert fake.shape == (4,)
    compiled = torch.compile(lambda t: Mul2(t) + 1, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
    torch.library.opcheck(Mul2.op, (torch.randn(3, requires_grad=True),))


@pytest.mark.slow
def test_cpp_kernel_is_left_to_the_dispatcher(cpp: Any) -> None:
    """The op's own C++ kernel is no opclass kernel: its device is not fast-pathed."""
    Mul2 = _mul2_class()
    plan = Mul2.record.plan
    assert plan.kernels == {}
    assert str(plan) == "fast path off: cpu runs the kernel another Library registered at CPU"


@pytest.mark.slow
def test_remove_leaves_the_cpp_op_and_its_kernel(cpp: Any) -> None:
    Mul2 = _mul2_class()
    assert has_kernel(f"{CPP_NS}::mul2", "Meta") and has_kernel(f"{CPP_NS}::mul2", "Autograd")
    opclass.remove(Mul2)
    assert not has_kernel(f"{CPP_NS}::mul2", "Meta") and not has_kernel(f"{CPP_NS}::mul2", "Autograd")
    assert has_kernel(f"{CPP_NS}::mul2", "CPU")
    assert torch.equal(cpp.mul2(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(RuntimeError, match="was removed"):
        Mul2(torch.ones(2))


@pytest.mark.slow
def test_redefinition_replaces_only_the_class_own_registrations(cpp: Any) -> None:
    Old = _mul2_class()

    class Mul2(CustomOp, name=f"{CPP_NS}::mul2", existing=True):
        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad * 3  # deliberately not the true gradient: shows which formula runs

    assert not Old.record is None and Old.record is Mul2.record
    x = torch.ones(2, requires_grad=True)
    Old(x).sum().backward()  # the old class is redirected to the live op
    assert x.grad is not None and torch.equal(x.grad, torch.full((2,), 3.0))
    assert has_kernel(f"{CPP_NS}::mul2", "CPU")


@pytest.mark.slow
def test_class_supplies_the_kernel_of_a_device_the_op_lacks(cpp: Any) -> None:
    class Shift(CustomOp, name=f"{CPP_NS}::shift", existing=True):
        @staticmethod
        def cpu(x: Tensor, s: float = 1.0) -> Tensor:
            return x + s

        @staticmethod
        def abstract(x: Tensor, s: float = 1.0) -> Tensor:
            return torch.empty_like(x)

    assert Shift.schema == "(Tensor x, float s=1.) -> Tensor"
    assert list(Shift.record.plan.kernels) == ["cpu"]  # its own kernel: fast path allowed
    assert torch.equal(Shift(torch.zeros(2)), torch.ones(2))
    assert torch.equal(Shift(torch.zeros(2), s=2.5), torch.full((2,), 2.5))
    assert_paths_agree(Shift, lambda: ((torch.arange(3.0), 2.0), {}))
    assert_paths_agree(Shift, lambda: ((torch.arange(3.0),), {}))
    # No formula: grad is the dispatcher's (torch's fallback for an op without an autograd kernel).
    assert Shift.record.plan.grad == "dispatcher" and not has_kernel(f"{CPP_NS}::shift", "Autograd")
    torch.library.opcheck(Shift.op, (torch.randn(3), 0.5))
    opclass.remove(Shift)
    assert not has_kernel(f"{CPP_NS}::shift", "CPU")
    with pytest.raises(NotImplementedError):
        cpp.shift(torch.zeros(2))


@pytest.mark.slow
def test_class_with_no_hooks_is_a_typed_handle(cpp: Any) -> None:
    class Mul2(CustomOp, name=f"{CPP_NS}::mul2", existing=True):
        pass

    assert torch.equal(Mul2(torch.ones(2)), torch.full((2,), 2.0))
    assert_paths_agree(Mul2, lambda: ((torch.arange(3.0),), {}))


# ---------------------------------------------------------------------- definition errors


@pytest.mark.slow
def test_kernel_for_a_device_with_a_kernel_is_refused(cpp: Any) -> None:
    with pytest.raises(OpDefinitionError) as e:

        class Mul2(CustomOp, name=f"{CPP_NS}::mul2", existing=True):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x * 2

    message = str(e.value)
    assert message.startswith("Mul2.cpu(x: Tensor) -> Tensor: opclass_cpp_test::mul2 already has a kernel for cpu tensors (CPU: registered at ")
    assert "main.cpp" in message and message.endswith("drop cpu: the op's own kernel stays in charge")


@pytest.mark.slow
def test_annotations_must_agree_with_the_existing_schema(cpp: Any) -> None:
    with pytest.raises(OpDefinitionError) as e:

        class Shift(CustomOp, name=f"{CPP_NS}::shift", existing=True):
            @staticmethod
            def cpu(x: Tensor, s: int = 1) -> Tensor:
                return x + s

    assert str(e.value) == (
        "Shift.cpu(x: Tensor, s: int = 1) -> Tensor: disagrees with the existing op opclass_cpp_test::shift(Tensor x, float s=1.) -> Tensor "
        "(parameter 's' is float vs int); annotate it as the op's schema says, or not at all"
    )


@pytest.mark.slow
def test_unannotated_kernel_must_take_the_existing_arguments(cpp: Any) -> None:
    with pytest.raises(OpDefinitionError, match=r"Shift\.cpu\(x\).*write cpu\(x, s=1\.0\)"):

        class Shift(CustomOp, name=f"{CPP_NS}::shift", existing=True):
            @staticmethod
            def cpu(x):  # type: ignore[no-untyped-def]
                return x + 1


def test_existing_name_must_exist(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as e:

        class Missing(CustomOp, name=f"{ns}::missing", existing=True):
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return x

    assert str(e.value) == (
        f"class Missing: existing=True, but {ns}::missing is not defined; "
        "define the op first (TORCH_LIBRARY, Library.define, or load its library), or drop existing=True"
    )


@pytest.mark.parametrize("keyword", [{"schema": "(Tensor x) -> Tensor"}, {"mutates_args": ()}, {"tags": torch.Tag.pointwise}])
def test_defining_keywords_are_refused(lib: torch.library.Library, ns: str, keyword: dict[str, Any]) -> None:
    lib.define("op(Tensor x) -> Tensor")
    key = next(iter(keyword))
    with pytest.raises(OpDefinitionError, match=f"class Op: {key}= with existing=True: the op is defined already"):

        class Op(CustomOp, name=f"{ns}::op", existing=True, **keyword):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x + 1


def test_existing_must_be_a_bool(lib: torch.library.Library, ns: str) -> None:
    lib.define("op(Tensor x) -> Tensor")
    with pytest.raises(OpDefinitionError, match="existing='yes' must be True or False"):

        class Op(CustomOp, name=f"{ns}::op", existing="yes"):  # type: ignore[arg-type]
            pass


def test_existing_on_an_opclass_op_is_refused(ns: str) -> None:
    class Own(CustomOp, name=f"{ns}::own"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    with pytest.raises(OpDefinitionError, match=rf"existing=True, but {ns}::own is an opclass op \(class Own defines it\)"):

        class Again(CustomOp, name=f"{ns}::own", existing=True):
            pass

    assert Own.record.live


def test_plain_class_on_an_extended_op_is_refused(lib: torch.library.Library, ns: str) -> None:
    lib.define("op(Tensor x) -> Tensor")

    class Ext(CustomOp, name=f"{ns}::op", existing=True):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    with pytest.raises(OpDefinitionError, match=rf"{ns}::op is defined outside opclass \(class Ext extends it with existing=True\)"):

        class Plain(CustomOp, name=f"{ns}::op"):
            @staticmethod
            def default(x: Tensor) -> Tensor:
                return x

    assert Ext.record.live and torch.equal(Ext(torch.zeros(1)), torch.ones(1))


def test_autograd_formula_on_an_op_with_autograd_is_refused(lib: torch.library.Library, ns: str) -> None:
    lib.define("op(Tensor x) -> Tensor")
    lib.impl("op", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("op", lambda x: x * 2, "Autograd")
    with pytest.raises(OpDefinitionError, match=rf"Op.setup_context\(.*\) -> None: {ns}::op already has an autograd kernel \(Autograd: registered at "):

        class Op(CustomOp, name=f"{ns}::op", existing=True):
            @staticmethod
            def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
                pass

            @staticmethod
            def backward(ctx: Any, grad: Tensor) -> Tensor:
                return grad


def test_a_formula_for_a_custom_op_op_points_at_register_autograd(ns: str) -> None:
    @torch.library.custom_op(f"{ns}::co", mutates_args=())
    def co(x: Tensor) -> Tensor:
        return x * 2

    with pytest.raises(OpDefinitionError) as info:

        class Op(CustomOp, name=f"{ns}::co", existing=True):
            @staticmethod
            def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
                pass

            @staticmethod
            def backward(ctx: Any, grad: Tensor) -> Tensor:
                return grad * 2

    assert str(info.value).endswith(
        f"{ns}::co was made with torch.library.custom_op, whose autograd kernel takes its formula only from "
        f"torch.library.register_autograd('{ns}::co', backward, setup_context=...): give it there, and leave the formula out of this class"
    ), str(info.value)
    # The fix it names works.
    torch.library.register_autograd(f"{ns}::co", lambda ctx, grad: grad * 2, setup_context=lambda ctx, inputs, output: None)
    x = torch.ones(2, requires_grad=True)
    co(x).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full((2,), 2.0))


def test_a_fake_kernel_for_an_op_defined_elsewhere_asks_for_existing(lib: torch.library.Library, ns: str) -> None:
    lib.define("op(Tensor x) -> Tensor")
    lib.impl("op", lambda x: x * 2, "CPU")
    with pytest.raises(OpDefinitionError) as info:

        class Op(CustomOp, name=f"{ns}::op"):
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)

    assert str(info.value).endswith(
        f"{ns}::op is an op defined outside opclass, and the class defines no kernel (cpu, cuda or default) to be an op of "
        "its own; write existing=True in the class statement to add Op.abstract to that op"
    ), str(info.value)

    class Fixed(CustomOp, name=f"{ns}::op", existing=True):  # the fix it names
        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    with FakeTensorMode() as mode:
        assert Fixed(mode.from_tensor(torch.ones(3))).shape == (3,)


def test_abstract_on_an_op_with_a_fake_kernel_is_refused(lib: torch.library.Library, ns: str) -> None:
    lib.define("op(Tensor x) -> Tensor")
    lib._register_fake("op", lambda x: torch.empty_like(x))
    with pytest.raises(OpDefinitionError, match=rf"Op.abstract\(x: Tensor\) -> Tensor: {ns}::op already has a fake kernel \(a fake kernel registered at "):

        class Op(CustomOp, name=f"{ns}::op", existing=True):
            @staticmethod
            def abstract(x: Tensor) -> Tensor:
                return torch.empty_like(x)


# ---------------------------------------------------------------------- a Library("DEF") op


def test_library_op_gets_fake_autograd_and_vmap(lib: torch.library.Library, ns: str) -> None:
    lib.define("scale(Tensor x, float f) -> Tensor")
    lib.impl("scale", lambda x, f: x * f, "CPU")
    vmapped: list[Any] = []

    class Scale(CustomOp, name=f"{ns}::scale", existing=True):
        @staticmethod
        def abstract(x: Tensor, f: float) -> Tensor:
            return torch.empty_like(x)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
            ctx.f = inputs[1]

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
            return grad * ctx.f, None

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], x: Tensor, f: float) -> tuple[Tensor, int]:
            vmapped.append(in_dims)
            return x.movedim(in_dims[0], 0) * f, 0

    x = torch.ones(2, 3)
    assert torch.equal(torch.vmap(lambda t: Scale(t, 2.0))(x), x * 2) and vmapped == [(0, None)]
    t = torch.ones(3, requires_grad=True)
    Scale(t, 3.0).sum().backward()
    assert t.grad is not None and torch.equal(t.grad, torch.full((3,), 3.0))
    assert_paths_agree(Scale, lambda: ((torch.arange(3.0, requires_grad=True), 2.0), {}))
    torch.library.opcheck(Scale.op, (torch.randn(3, requires_grad=True), 2.0))
    opclass.remove(Scale)
    assert torch.equal(getattr(torch.ops, ns).scale(torch.ones(1), 4.0), torch.full((1,), 4.0))
    assert not has_kernel(f"{ns}::scale", "Meta") and has_kernel(f"{ns}::scale", "CPU")


def test_extended_mutating_op_leaves_version_counters_to_the_dispatcher(lib: torch.library.Library, ns: str) -> None:
    lib.define("fill_(Tensor(a!) x, float v) -> ()")

    class Fill(CustomOp, name=f"{ns}::fill_", existing=True):
        @staticmethod
        def cpu(x: Tensor, v: float) -> None:
            x.fill_(v)

    assert str(Fill.record.plan) == "fast path off: the op was defined elsewhere and mutates its arguments"
    assert_paths_agree(Fill, lambda: ((torch.zeros(3), 1.0), {}))
    with FakeTensorMode():
        assert Fill(torch.empty(2), 1.0) is None  # the generated fake kernel of a no-output op
