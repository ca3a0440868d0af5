"""Nothing silent with providers: each mistake a kernel-library author made with providers from
the docs alone either works, or says what is wrong (naming the op, the provider and the fix) at
the earliest moment it can, the same on every route (the class call under either guard, and
``torch.ops``)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import opclass
import opclass.testing
from opclass import CustomOp, OpDefinitionError
from opclass._harness import call_paths

ROOT = Path(__file__).resolve().parent.parent


def make(ns: str, **extra: Any) -> Any:
    """``default`` adds k; ``plus1`` adds k + 1 on CPU float32 only."""

    class Shift(CustomOp, name=f"{ns}::shift"):
        @staticmethod
        def default(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k

        @opclass.provider("cpu", supports=lambda x, k: x.dtype == torch.float32)
        @staticmethod
        def plus1(x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 1

        locals().update(extra)

    return Shift


def outcomes(op: Any, *args: Any, **kwargs: Any) -> set[str]:
    """What each route gives: the value added to the first element, or the error's type and text."""
    seen = set()
    for fn in call_paths(op).values():
        try:
            seen.add(str(float((fn(*args, **kwargs) - args[0]).flatten()[0])))
        except Exception as e:  # noqa: BLE001 - the test compares what every route raises
            seen.add(f"{type(e).__name__}: {e}")
    return seen


def define(ns: str, body: str, **names: Any) -> Any:
    """A class statement from source text, as a user writes it (``Op``, with a ``default``)."""
    source = f"class Op(CustomOp, name='{ns}::op'):\n    @staticmethod\n    def default(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n" + body
    scope = {"CustomOp": CustomOp, "Tensor": Tensor, "opclass": opclass, "torch": torch, **names}
    exec(source, scope)
    return scope["Op"]


# --------------------------------------------------------------------------- predicates


def test_predicate_parameters_in_another_order_are_refused(ns: str) -> None:
    body = "    @opclass.provider('cpu', supports=lambda k, x: x.is_contiguous())\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n"
    with pytest.raises(OpDefinitionError, match=r"provider 'fast': supports\(\) has parameter 'k' at place 1, where the op has 'x'.*write supports=lambda x, k: \.\.\."):
        define(ns, body)
    # Names that are none of the op's are taken by place: they cannot be another argument.
    op = define(ns, body.replace("lambda k, x: x.is", "lambda t, _k: t.is"))
    assert outcomes(op, torch.zeros(2), 1.0) == {"1.0"}


@pytest.mark.parametrize("said", [None, 1, "yes"])
def test_a_predicate_that_answers_no_bool_is_an_error_on_every_route(ns: str, said: Any) -> None:
    body = "    @opclass.provider('cpu', supports=lambda x, k: said)\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k + 1\n"
    op = define(ns, body, said=said)
    found = outcomes(op, torch.zeros(2))
    assert found == {f"TypeError: {ns}::op (Op.fast): supports() returned {said!r} ({type(said).__name__}), not a bool; return True or False (a def without return says None)"}, found


def test_a_predicate_may_take_keyword_only_arguments(ns: str) -> None:
    class Scaled(CustomOp, name=f"{ns}::scaled"):
        @staticmethod
        def default(x: Tensor, *, k: float = 1.0) -> Tensor:
            return x * k

        @opclass.provider("cpu", supports=lambda x, *, k: k > 0)
        @staticmethod
        def positive(x: Tensor, *, k: float = 1.0) -> Tensor:
            return x * k + 1

    assert outcomes(Scaled, torch.zeros(2), k=2.0) == {"1.0"}
    assert outcomes(Scaled, torch.ones(2), k=-2.0) == {"-3.0"}  # default: 1 * -2, minus the 1 passed


# --------------------------------------------------------------------------- declarations


def test_supports_and_available_on_an_own_kernel_apply(ns: str) -> None:
    class Own(CustomOp, name=f"{ns}::own"):
        @opclass.provider(supports=lambda x: x.dtype == torch.float32)
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 2

    assert outcomes(Own, torch.zeros(2)) == {"1.0"}
    assert outcomes(Own, torch.zeros(2, dtype=torch.float16)) == {"2.0"}  # cpu declines: default runs
    assert "cpu (cpu): supports() returned False" in opclass.explain_providers(Own, torch.zeros(2, dtype=torch.float16))


def test_a_device_on_an_own_kernel_is_refused(ns: str) -> None:
    body = "    @opclass.provider('cuda')\n    @staticmethod\n    def cpu(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n"
    with pytest.raises(OpDefinitionError, match=r"Op.cpu\(x: Tensor, k: float = 0.0\) -> Tensor: @opclass.provider\('cuda'\) on the op's own cpu kernel, which runs on cpu tensors; drop the device"):
        define(ns, body)


def test_staticmethod_above_provider_still_declares_a_provider(ns: str) -> None:
    body = "    @staticmethod\n    @opclass.provider('cpu')\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k + 1\n"
    op = define(ns, body)
    assert outcomes(op, torch.zeros(2)) == {"1.0"}
    assert [p.name for p in opclass.providers_of(op)] == ["fast", "default"]


@pytest.mark.parametrize(
    ("device", "problem"),
    [
        ("'gpu'", "'gpu' is not a device type a kernel runs on (those are cpu, cuda, mps, xpu, hpu, mtia, xla, ipu, maia, hip, privateuseone); did you mean 'cuda'?"),
        ("('cpu', 'vulkan')", "'vulkan' is not a device type a kernel runs on"),
    ],
)
def test_an_unknown_device_is_refused_naming_the_class_and_provider(ns: str, device: str, problem: str) -> None:
    body = f"    @opclass.provider({device})\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n"
    with pytest.raises(OpDefinitionError) as e:
        define(ns, body)
    assert str(e.value).startswith(f"Op.providers: provider 'fast': {problem}"), str(e.value)


def test_available_raising_a_bug_surfaces_and_import_error_means_unavailable(ns: str) -> None:
    def broken() -> bool:
        return torch.cuda.is_availble()  # type: ignore[attr-defined,no-any-return]  # the typo

    body = "    @opclass.provider('cpu', available=check)\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k + 1\n"
    with pytest.raises(OpDefinitionError, match=r"Op.fast\(x: Tensor, k: float = 0.0\) -> Tensor: available\(\) raised AttributeError: .*is_availble.*fix available\(\)"):
        define(ns, body, check=broken)
    with pytest.raises(OpDefinitionError, match=r"available\(\) returned None, not a bool"):
        define(ns, body, check=lambda: None)

    def missing() -> bool:
        raise ImportError("vendor_kernels is not installed")

    op = define(ns, body, check=missing)
    assert outcomes(op, torch.zeros(2)) == {"0.0"}
    assert "fast (cpu): not available: available() raised ImportError: vendor_kernels is not installed" in opclass.explain_providers(op, torch.zeros(2))
    assert [(p.name, p.available, p.why_not) for p in opclass.providers_of(op)][0] == ("fast", False, "available() raised ImportError: vendor_kernels is not installed")


def test_provider_names_must_be_identifiers(ns: str) -> None:
    op = make(ns)
    for name in ("a,b", "a=b", "", "with space"):
        with pytest.raises(OpDefinitionError, match=f"{name!r} is no provider name"):
            opclass.add_provider(op, name, lambda x, k=0.0: x, "cpu")
    assert [p.name for p in opclass.providers_of(op)] == ["plus1", "default"]


def test_partial_and_bound_method_providers_are_supported(ns: str) -> None:
    op = make(ns)

    def scaled(x: Tensor, k: float = 0.0, *, by: float) -> Tensor:
        return x * by + k

    class Kernels:
        def shifted(self, x: Tensor, k: float = 0.0) -> Tensor:
            return x + k + 7

    opclass.add_provider(op, "partial", functools.partial(scaled, by=1.0), "cpu")
    opclass.add_provider(op, "bound", Kernels().shifted, "cpu")
    with opclass.use_providers({op: ["bound"]}):
        assert outcomes(op, torch.zeros(2)) == {"7.0"}
    with opclass.use_providers({op: ["partial"]}):
        assert outcomes(op, torch.zeros(2), 3.0) == {"3.0"}
    opclass.remove_provider(op, "partial")
    opclass.remove_provider(op, "bound")


# --------------------------------------------------------------------------- orders


def test_an_order_given_as_a_string_or_with_a_name_twice_is_refused(ns: str) -> None:
    op = make(ns)
    with pytest.raises(TypeError, match=rf"opclass.use_providers takes the provider names of {ns}::shift as a list, not the string 'plus1': write \['plus1'\]"):
        with opclass.use_providers({op: "plus1"}):
            pass
    with pytest.raises(ValueError, match="opclass.set_provider_order names provider 'plus1' twice"):
        opclass.set_provider_order(op, ["plus1", "plus1"])
    assert opclass.provider_order(op) == ("plus1", "default")
    with pytest.raises(ValueError, match=rf"an empty order for {ns}::shift would run nothing: name its providers, or pass None"):
        opclass.set_provider_order(op, [])


def test_explain_providers_takes_only_what_the_op_takes(ns: str) -> None:
    op = make(ns)
    with pytest.raises(TypeError, match=rf"explain_providers: {ns}::shift takes \(x, k=0.0\), not these arguments: got an unexpected keyword argument 'y'"):
        opclass.explain_providers(op, torch.zeros(2), y=1.0)


def test_provider_without_parentheses_and_with_a_torch_device(ns: str) -> None:
    with pytest.raises(TypeError, match=r"write @opclass.provider\(\) \(with parentheses\) above @staticmethod"):
        define(ns, "    @opclass.provider\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n")
    op = define(ns, "    @opclass.provider(torch.device('cpu'))\n    @staticmethod\n    def fast(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k + 1\n")
    assert [(p.name, p.devices) for p in opclass.providers_of(op)][0] == ("fast", ("cpu",))


def test_an_order_naming_a_provider_the_op_lacks_refuses_every_call(ns: str) -> None:
    """An order that cannot apply is no shorter order: each route says so (here a block naming a
    provider that was removed inside it, in another thread)."""
    op = make(ns)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 5, "cpu")
    with opclass.use_providers({op: ["vendor", "default"]}):
        worker = threading.Thread(target=opclass.remove_provider, args=(op, "vendor"))
        worker.start()
        worker.join()
        found = outcomes(op, torch.zeros(2))
        assert len(found) == 1 and found.pop().startswith(
            f"RuntimeError: {ns}::shift: opclass.use_providers names provider 'vendor', which it does not have (it has plus1, default); the order cannot apply"
        )
        assert "default (any device): the order names 'vendor', which the op does not have" in opclass.explain_providers(op, torch.zeros(2))


def test_remove_provider_inside_a_block_that_names_it_is_refused(ns: str) -> None:
    op = make(ns)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 5, "cpu")
    with opclass.use_providers({op: ["vendor"]}):
        with pytest.raises(ValueError, match=f"a use_providers block open here names 'vendor' for {ns}::shift: remove it after the block"):
            opclass.remove_provider(op, "vendor")
        assert outcomes(op, torch.zeros(2)) == {"5.0"}
    opclass.remove_provider(op, "vendor")


def test_remove_provider_takes_its_name_out_of_the_order_in_code(ns: str) -> None:
    op = make(ns)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 5, "cpu")
    opclass.set_provider_order(op, ["vendor", "default"])
    with pytest.warns(UserWarning, match=f"the order set for {ns}::shift named 'vendor'; it now is default"):
        opclass.remove_provider(op, "vendor")
    assert opclass.provider_order(op) == ("default",)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 6, "cpu")  # no did-you-mean of the removed name
    assert outcomes(op, torch.zeros(2)) == {"0.0"}
    opclass.set_provider_order(op, None)
    assert outcomes(op, torch.zeros(2, dtype=torch.float64)) == {"6.0"}  # plus1 declines float64
    opclass.remove_provider(op, "vendor")


def test_set_provider_order_none_works_on_any_op_and_remove_forgets_the_order(ns: str) -> None:
    op = make(ns)
    opclass.set_provider_order(op, ["plus1"])
    opclass.remove(op)
    opclass.set_provider_order(f"{ns}::shift", None)  # a removed op's name: nothing to refuse

    opclass.set_provider_order(make(ns), ["plus1"])
    opclass.remove(f"{ns}::shift")

    class Shift(CustomOp, name=f"{ns}::shift"):  # a later class of that name, without plus1
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 0

        @opclass.provider("cpu")
        @staticmethod
        def other(x: Tensor) -> Tensor:
            return x + 3

    assert outcomes(Shift, torch.zeros(2)) == {"3.0"}

    class Plain(CustomOp, name=f"{ns}::plain"):
        @staticmethod
        def default(x: Tensor) -> Tensor:
            return x + 1

    opclass.set_provider_order(Plain, None)
    assert opclass.explain_providers(Plain) == f"{ns}::plain has no providers: its own kernels run (default (any device))"
    assert opclass.tune_providers(Plain, [(torch.zeros(2),)], show=False).order == ()
    assert [(p.name, p.origin, p.in_order) for p in opclass.providers_of(Plain)] == [("default", "own kernel", True)]
    assert opclass.provider_order(Plain) == ("default",)


def test_adding_a_provider_outside_the_order_in_force_warns(ns: str) -> None:
    op = make(ns)
    opclass.set_provider_order(op, ["plus1", "default"])
    with pytest.warns(UserWarning, match=rf"the order in force for {ns}::shift \(opclass.set_provider_order: plus1, default\) does not name 'vendor', so it will not run"):
        opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 5, "cpu")
    with opclass.use_providers({op: ["default"]}), pytest.warns(UserWarning, match=r"\(opclass.use_providers: default\) does not name 'late'"):
        opclass.add_provider(op, "late", lambda x, k=0.0: x + k + 6, "cpu")
    assert [(p.name, p.origin, p.in_order) for p in opclass.providers_of(op)][:2] == [("plus1", "class body", True), ("default", "own kernel", True)]
    assert {p.name: p.origin for p in opclass.providers_of(op)}["vendor"] == f"opclass.add_provider from {__name__}"
    opclass.set_provider_order(op, None)
    opclass.remove_provider(op, "vendor")
    opclass.remove_provider(op, "late")


def test_a_redefinition_that_no_longer_fits_an_added_provider_names_who_added_it(ns: str) -> None:
    op = make(ns)
    opclass.add_provider(op, "vendor", lambda x, k=0.0: x + k + 10, "cpu")
    with pytest.raises(OpDefinitionError) as e:

        class Shift(CustomOp, name=f"{ns}::shift"):
            @staticmethod
            def default(x: Tensor, k: float = 0.0, *, scale: float = 1.0) -> Tensor:
                return x + k

    assert f"(it was added to the op from outside the class, by opclass.add_provider in {__name__}); opclass.remove_provider(Shift, 'vendor') first" in str(e.value)
    opclass.remove_provider(op, "vendor")


def test_opening_a_block_while_another_thread_redefines_the_op(ns: str) -> None:
    make(ns)
    errors: list[BaseException] = []
    done, redefined = threading.Event(), [0]

    def redefine() -> None:
        while not done.is_set():  # in place, and not (a provider more)
            make(ns)
            make(ns, other=opclass.provider("cpu")(staticmethod(lambda x, k=0.0: x + k)))
            redefined[0] += 2

    worker = threading.Thread(target=redefine)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, inside the redefinition too
    worker.start()
    try:
        while redefined[0] < 100:
            try:
                with opclass.use_providers({f"{ns}::shift": ["default"]}):
                    pass
            except BaseException as e:  # noqa: BLE001 - collected for the assertion
                errors.append(e)
    finally:
        done.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]


# --------------------------------------------------------------------------- tuning, tracing


def test_tune_keeps_a_provider_that_declines_every_sample(ns: str) -> None:
    op = make(ns)  # plus1 takes float32 only; the samples are float64
    order = opclass.tune_providers(op, [(torch.zeros(8, dtype=torch.float64),)], min_run_time=0.01, show=False).order
    assert order == ("plus1", "default")
    opclass.set_provider_order(op, order)
    assert outcomes(op, torch.zeros(2)) == {"1.0"}  # the float32 call still gets plus1
    opclass.set_provider_order(op, None)


def test_an_order_change_for_an_op_traced_through_torch_ops_warns(ns: str) -> None:
    """The torch.ops route has no guard (class calls do: tests/test_compile_providers.py)."""
    op = make(ns, traceable=True)
    compiled = torch.compile(lambda x: getattr(torch.ops, ns).shift(x), backend="aot_eager", fullgraph=True)
    assert float(compiled(torch.zeros(2))[0]) == 1.0
    with pytest.warns(UserWarning, match=rf"{ns}::shift \(Shift\) is traceable and was traced by torch.compile through torch.ops.{ns}.shift .*class calls, Shift\(...\), are guarded"):
        opclass.set_provider_order(op, ["default"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opclass.set_provider_order(op, ["default"])  # the same choice: nothing to warn about
    opclass.set_provider_order(op, None)


# --------------------------------------------------------------------------- routes


def test_an_order_naming_only_a_cuda_provider_says_the_same_on_every_route(ns: str) -> None:
    op = make(ns, gpu=opclass.provider("cuda")(staticmethod(lambda x, k=0.0: x + k + 9)))
    with opclass.use_providers({op: ["gpu"]}):
        found = outcomes(op, torch.zeros(2))
    assert len(found) == 1, found
    assert found.pop().startswith(f"RuntimeError: {ns}::shift: no provider runs this call (x: Tensor(float32, [2], cpu), k: 0.0): gpu: runs on cuda; plus1: not in the order in force; default: not in the order in force")


def test_a_failing_provider_is_blamed_by_name_on_every_route(ns: str) -> None:
    op = make(ns, aliasing=opclass.provider("cpu", supports=lambda x, k: True)(staticmethod(lambda x, k=0.0: x.view(-1))))
    with opclass.use_providers({op: ["aliasing", "default"]}):
        found = {message.split(" (", 1)[1].split(")")[0] for message in outcomes(op, torch.zeros(2))}  # "RuntimeError: ns::op (Shift.x): ..."
    assert found == {"Shift.aliasing"}, found


def test_a_mutating_op_whose_only_provider_declines_bumps_the_version_once(ns: str) -> None:
    class Fill(CustomOp, name=f"{ns}::fill", mutates_args=("x",)):
        @opclass.provider("cpu", supports=lambda x, n: n > 0)
        @staticmethod
        def fill(x: Tensor, n: int) -> None:
            x.fill_(n)

    bumps = set()
    for fn in call_paths(Fill).values():
        x = torch.zeros(2)
        with pytest.raises(RuntimeError, match="no provider runs this call"):
            fn(x, 0)
        bumps.add(x._version)
    assert bumps == {1}


def test_the_write_check_names_the_provider_that_wrote(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCLASS_DEBUG", "1")
    op = make(ns, sneaky=opclass.provider("cpu", supports=lambda x, k: k > 0)(staticmethod(lambda x, k=0.0: x.add_(k) + 0)))
    with opclass.use_providers({op: ["sneaky", "default"]}):
        found = outcomes(op, torch.zeros(2), 1.0)
    assert len(found) == 1 and f"{ns}::shift (Shift.sneaky) wrote to 'x'" in found.pop()


# --------------------------------------------------------------------------- the environment


def _run(tmp_path: Path, code: str, **env: str) -> str:
    script = tmp_path / "script.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=tmp_path)
    return (done.stdout + done.stderr).strip().splitlines()[-1]


OP = (
    "import os, torch, opclass\nfrom torch import Tensor\n"
    "class Op(opclass.CustomOp, name='t_mis::op'):\n"
    "    @staticmethod\n    def default(x: Tensor) -> Tensor:\n        return x.clone()\n"
    "    @opclass.provider('cpu')\n    @staticmethod\n    def one(x: Tensor) -> Tensor:\n        return x + 1\n"
)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("t_mis::op=one,default,t_mis::other=one", "OPCLASS_PROVIDERS='t_mis::op=one,default,t_mis::other=one': 't_mis::other=one' in the order of t_mis::op is no provider name: separate two ops' entries with ';'"),
        ("t_mis::op=one;t_mis::op=default", "OPCLASS_PROVIDERS='t_mis::op=one;t_mis::op=default': t_mis::op has two entries: give each op one"),
        ("t_mis::op=one,one", "the order of t_mis::op names 'one' twice"),
    ],
)
def test_a_mistake_in_the_environment_is_an_error_at_import(tmp_path: Path, value: str, error: str) -> None:
    assert error in _run(tmp_path, "import opclass\nopclass.CustomOp\n", OPCLASS_PROVIDERS=value)


def test_the_environment_changed_after_import_is_an_error(tmp_path: Path) -> None:
    late = "import opclass\nopclass.CustomOp\nimport os\nos.environ['OPCLASS_PROVIDERS'] = 't_mis::op=default'\n" + OP.replace("import os, ", "import ")
    assert _run(tmp_path, late).startswith("RuntimeError: OPCLASS_PROVIDERS changed after opclass was imported (from '' to 't_mis::op=default'); opclass reads it once, at import")
    mode = OP + "os.environ['OPCLASS_PROVIDER_MODE'] = 'deterministic'\nopclass.set_provider_order(Op, None)\n"
    assert _run(tmp_path, mode).startswith("RuntimeError: OPCLASS_PROVIDER_MODE changed after opclass was imported")


def test_the_environment_may_name_a_provider_a_package_adds_later(tmp_path: Path) -> None:
    later = OP + "opclass.add_provider(Op, 'vendor', lambda x: x + 5, 'cpu')\nprint(float(Op(torch.zeros(1))[0]), float(Op.op(torch.zeros(1))[0]))\n"
    assert _run(tmp_path, later, OPCLASS_PROVIDERS="t_mis::op=vendor,default") == "5.0 5.0"
    shadowed = OP + "import warnings\nwarnings.simplefilter('error')\nopclass.set_provider_order(Op, ['default'])\n"
    assert _run(tmp_path, shadowed, OPCLASS_PROVIDERS="t_mis::op=one,default").startswith("UserWarning: opclass.set_provider_order: OPCLASS_PROVIDERS gives the order of t_mis::op, which comes first")
    never = OP + "print(Op(torch.zeros(1)))\n"
    assert _run(tmp_path, never, OPCLASS_PROVIDERS="t_mis::op=vendor,default").startswith(
        "RuntimeError: t_mis::op: OPCLASS_PROVIDERS names provider 'vendor', which it does not have (it has one, default)"
    )


def test_an_op_name_in_the_environment_that_looks_like_a_typo_warns(tmp_path: Path) -> None:
    code = "import warnings\nwarnings.simplefilter('always')\n" + OP + "print('defined')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "OPCLASS_PROVIDERS": "t_mis::opp=one"}, cwd=tmp_path)
    assert "UserWarning: OPCLASS_PROVIDERS names t_mis::opp, which is no op (yet): did you mean t_mis::op, defined here?" in done.stderr, done.stderr
    assert done.stdout.strip() == "defined"


def test_batch_invariance_is_checked_on_the_rows_of_the_activation_not_a_weight_before_it(ns: str) -> None:
    class Scale(CustomOp, name=f"{ns}::scale"):
        @staticmethod
        def default(weight: Tensor, x: Tensor) -> Tensor:
            return x * weight

        @opclass.provider("cpu", batch_invariant=True, atol=1e-2, rtol=0.0)
        @staticmethod
        def mixing(weight: Tensor, x: Tensor) -> Tensor:  # row i depends on the batch: not invariant
            return x * weight + 0 * x.sum(0, keepdim=True) + (x.shape[0] > 1) * 1e-3

    with pytest.raises(AssertionError, match=r"\(Scale.mixing\) is declared batch_invariant, but row 0 of a batch of 4 differs"):
        opclass.testing.check_op(Scale, [(torch.randn(8), torch.randn(4, 8))], opcheck=False, gradcheck=False, fast_path=False)


def test_provider_on_a_hook_that_is_no_backend_kernel_is_refused(ns: str) -> None:
    body = "    @opclass.provider('cpu', supports=lambda x, k: True)\n    @staticmethod\n    def reference(x: Tensor, k: float = 0.0) -> Tensor:\n        return x + k\n"
    with pytest.raises(OpDefinitionError, match=r"Op.reference\(x: Tensor, k: float = 0.0\) -> Tensor: marked a member of the 'providers' hook, but reference is a hook of its own and no backend kernel: the mark would be ignored; drop the decorator"):
        define(ns, body)
