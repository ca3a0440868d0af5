"""Definition-time errors: every broken ``CustomOp`` class raises ``OpDefinitionError`` as it is defined.

Each case in the table builds one broken class and checks that the error (a ``TypeError``) names the
class, the hook with the user's own signature, the problem and the fix, and that nothing was
registered with the dispatcher. Further tests check that a failed redefinition leaves the earlier
op of that name working, that helper static methods with unrelated names are allowed, and that a
name defined outside opclass is refused.
"""

import dataclasses
import inspect
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from opclass import CustomOp, OpDefinitionError

from _versions import needs_tag, tags_in

# --------------------------------------------------------------------------- the case table


@dataclasses.dataclass(frozen=True)
class Case:
    """A broken definition: ``build(ns)`` runs the class statement, which must fail."""

    id: str
    build: Callable[[str], None]
    hook: Optional[str]  # OpDefinitionError.hook
    fragments: tuple[str, ...]  # substrings the message must contain
    op: Optional[str]  # op name (in the test namespace) that must not exist afterwards


CASES: list[Case] = []


def case(hook: Optional[str], *fragments: str, op: Optional[str] = "bad") -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    """Register ``build`` as a case whose error is about ``hook`` and contains ``fragments``."""

    def register(build: Callable[[str], None]) -> Callable[[str], None]:
        CASES.append(Case(build.__name__, build, hook, fragments, op))
        return build

    return register


# ---- hooks must be static methods


@case("cpu", "Bad.cpu(x: Tensor) -> Tensor: hooks are static methods, but this is a plain function", "add @staticmethod above the def")
def plain_function_hook(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        def cpu(x: Tensor) -> Tensor:  # type: ignore[misc]
            return x + 1


@case("abstract", "Bad.abstract(cls, x: Tensor) -> Tensor: hooks are static methods, but this is a classmethod", "add @staticmethod above the def")
def classmethod_hook(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @classmethod
        def abstract(cls, x: Tensor) -> Tensor:
            return torch.empty_like(x)


@case("backward", "Bad.backward(ctx, grad): hooks are static methods, but this is a plain function", "add @staticmethod")
def plain_function_backward(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


# ---- near-miss hook names


def _near_miss(attr: str, meant: str) -> None:
    def build(ns: str) -> None:
        def fn(x: Tensor) -> Tensor:
            return x

        fn.__name__ = fn.__qualname__ = attr
        type(CustomOp)("Bad", (CustomOp,), {"__qualname__": "Bad", "default": staticmethod(lambda x: x + 1), attr: staticmethod(fn)}, name=f"{ns}::bad", schema="(Tensor x) -> Tensor")

    build.__name__ = f"near_miss_{attr}"
    case(attr, f"Bad.{attr}(x: Tensor) -> Tensor: not a hook; did you mean '{meant}'?")(build)


for _attr, _meant in [
    ("abstarct", "abstract"),
    ("Backward", "backward"),
    ("setup_ctx", "setup_context"),
    ("fake", "abstract"),
    ("meta", "abstract"),
    ("forward", "default"),
    ("cdua", "cuda"),
    ("CPU", "cpu"),
    ("vmapp", "vmap"),
]:
    _near_miss(_attr, _meant)


# ---- unknown device types


@case("gpu", "Bad.gpu(x: Tensor) -> Tensor: unknown device type 'gpu'", "the torch device type is 'cuda'", "rename the method cuda")
def device_gpu(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def gpu(x: Tensor) -> Tensor:
            return x + 1


@case("npu", "Bad.npu(x: Tensor) -> Tensor: unknown device type 'npu'", "'privateuseone'")
def device_npu(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def npu(x: Tensor) -> Tensor:
            return x + 1


@case("tpu", "Bad.tpu(x: Tensor) -> Tensor: unknown device type 'tpu'", "'xla'")
def device_tpu(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def tpu(x: Tensor) -> Tensor:
            return x + 1


@case("vulkan", "Bad.vulkan(x: Tensor) -> Tensor", "vulkan", "device_hook")
def device_without_hook(ns: str) -> None:
    """A real torch device type opclass has no hook for: must not be silently ignored as a helper."""

    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def vulkan(x: Tensor) -> Tensor:
            return x + 1


# ---- annotations and schema derivation


@case("cpu", "Bad.cpu(x): has no type annotations and the class gives no schema=", "annotate the kernel", "or pass schema=")
def missing_annotations(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x):  # type: ignore[no-untyped-def]
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, scale) -> Tensor: parameter 'scale' has no annotation; annotate it, e.g. scale: Tensor or scale: float")
def partially_annotated_parameter(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, scale) -> Tensor:  # type: ignore[no-untyped-def]
            return x * scale


@case("cpu", "Bad.cpu(x: Tensor, gain=1.0) -> Tensor: parameter 'gain' has no annotation; annotate it, e.g. gain: float = 1.0")
def unannotated_parameter_with_a_float_default(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, gain=1.0) -> Tensor:  # type: ignore[no-untyped-def]
            return x * gain


@case("cpu", "parameter 'dims' has no annotation; annotate it, e.g. dims: Sequence[int] = (0, 1)")
def unannotated_parameter_with_a_tuple_default(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, dims=(0, 1)) -> Tensor:  # type: ignore[no-untyped-def]
            return x.sum(dims)


@case("cpu", "parameter 'bias' has no annotation; annotate it, e.g. bias: Optional[Tensor] = None or bias: Optional[float] = None")
def unannotated_parameter_with_a_none_default(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, bias=None) -> Tensor:  # type: ignore[no-untyped-def]
            return x


@case("cpu", "Bad.cpu(x: Tensor): the return has no annotation", "-> None")
def partially_annotated_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor):  # type: ignore[no-untyped-def]
            return x + 1


@case(
    "abstract",
    "Bad.abstract(x: Tensor, n: float) -> Tensor: disagrees with",
    "Bad.cpu(x: Tensor, n: int) -> Tensor",
    "parameter 'n' is int vs float",
    "give every annotated kernel the same signature",
)
def kernels_disagree_on_type(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, n: int) -> Tensor:
            return x * n

        @staticmethod
        def abstract(x: Tensor, n: float) -> Tensor:
            return torch.empty_like(x)


@case(
    "abstract",
    "Bad.abstract(x: Tensor, n: int = 3) -> Tensor: disagrees with",
    "Bad.cpu(x: Tensor, n: int = 2) -> Tensor",
    "parameter 'n' default 2 vs 3",
)
def kernels_disagree_on_default(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, n: int = 2) -> Tensor:
            return x * n

        @staticmethod
        def abstract(x: Tensor, n: int = 3) -> Tensor:
            return torch.empty_like(x)


@case("abstract", "Bad.abstract(x: Tensor) -> tuple[Tensor, Tensor]: disagrees with", "Bad.cpu(x: Tensor) -> Tensor", "returns")
def kernels_disagree_on_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> tuple[Tensor, Tensor]:
            return torch.empty_like(x), torch.empty_like(x)


@case("abstract", "Bad.abstract(x: Tensor, *, y: Tensor) -> Tensor: disagrees with", "keyword-only")
def kernels_disagree_on_keyword_only(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x + y

        @staticmethod
        def abstract(x: Tensor, *, y: Tensor) -> Tensor:
            return torch.empty_like(x)


def _unsupported(label: str, annotation: Any, shown: str, fix: str) -> None:
    def build(ns: str) -> None:
        def cpu(x: Tensor, y: Any) -> Tensor:
            return x + 1

        cpu.__annotations__["y"] = annotation
        type(CustomOp)("Bad", (CustomOp,), {"__qualname__": "Bad", "cpu": staticmethod(cpu)}, name=f"{ns}::bad")

    build.__name__ = f"unsupported_{label}"
    case("cpu", f"Bad.cpu(x: Tensor, y: {shown}) -> Tensor: parameter 'y': unsupported annotation {shown}", fix)(build)


_unsupported("dict", dict[str, Tensor], "dict[str, Tensor]", "pass the values as separate parameters")
_unsupported("tuple_of_two_tensors", tuple[Tensor, Tensor], "tuple[Tensor, Tensor]", "write tuple[Tensor, ...] or list[Tensor]")
_unsupported("mixed_tuple", tuple[Tensor, int], "tuple[Tensor, int]", "write list[T] or separate parameters")
_unsupported("any", Any, "Any", "write a concrete schema type such as Tensor or int")
_unsupported("object", object, "object", "write a concrete schema type")
_unsupported("numpy_array", np.ndarray, "numpy.ndarray", "take a Tensor and convert with .numpy() inside the kernel")
_unsupported("bare_list", list, "list", "give the element type, e.g. list[Tensor] or list[int]")
_unsupported("list_of_dict", list[dict], "list[dict]", "supported are list[T]")
_unsupported("optional_tensor_list", Optional[list[Tensor]], "Optional[list[Tensor]]", "supported are list[T]")
_unsupported("set", set[int], "set[int]", "supported are list[T]")


@case("cpu", "Bad.cpu(x: Tensor, /) -> Tensor: positional-only parameters have no schema form", "list every parameter by name")
def positional_only(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, /) -> Tensor:
            return x + 1


@case("cpu", "Bad.cpu(*xs: Tensor) -> Tensor: *args have no schema form", "list every parameter by name")
def var_positional(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(*xs: Tensor) -> Tensor:
            return xs[0] + 1


@case("cpu", "Bad.cpu(x: Tensor, **options: int) -> Tensor: **kwargs have no schema form", "list every parameter by name")
def var_keyword(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, **options: int) -> Tensor:
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor) -> dict[str, Tensor]: unsupported return annotation dict[str, Tensor]", "return Tensor, list[Tensor]")
def unsupported_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> dict[str, Tensor]:
            return {"x": x}


@case("cpu", "Bad.cpu(x: Tensor) -> tuple[Tensor, ...]: unsupported return annotation", "one entry per output")
def variable_length_tuple_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, ...]:
            return (x + 1,)


@case("cpu", "Bad.cpu(x: Tensr) -> Tensor: annotation 'Tensr' of 'x' cannot be evaluated", "NameError")
def unresolvable_string_annotation(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: "Tensr") -> "Tensor":  # type: ignore[name-defined] # noqa: F821
            return x + 1


# ---- defaults


_SENTINEL = object()


@case("cpu", "Bad.cpu(x: Tensor, mode: float = <object object at", "parameter 'mode': default <object object", "has type object, not float or int", "give a default of the annotated type (float)")
def unsupported_default_object(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, mode: float = _SENTINEL) -> Tensor:  # type: ignore[assignment]
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, bias: Optional[Tensor] = tensor([0.])) -> Tensor", "parameter 'bias': default tensor([0.]): a Tensor parameter can only default to None", "write = None")
def unsupported_default_tensor(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, bias: Optional[Tensor] = torch.zeros(1)) -> Tensor:  # noqa: B008
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, n: int = None) -> Tensor: parameter 'n': default None for non-optional type SymInt (torch.ops would refuse None passed for it)", "annotate it Optional[...]")
def default_none_not_optional(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, n: int = None) -> Tensor:  # type: ignore[assignment]
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, ys: list[Tensor] = None) -> Tensor: parameter 'ys': default None for non-optional type Tensor[]", "annotate it Optional[...]")
def default_none_for_a_list(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, ys: list[Tensor] = None) -> Tensor:  # type: ignore[assignment]
            return x + 1


@case("cpu", "parameter 'layout': default torch.sparse_coo cannot be written in a schema", "annotate it Optional[...] with default None")
def default_unwritable_layout(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, layout: torch.layout = torch.sparse_coo) -> Tensor:
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, n: int = '3') -> Tensor", "parameter 'n'", "'3'")
def default_wrong_type_str_for_int(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, n: int = "3") -> Tensor:  # type: ignore[assignment]
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, n: int = 1.5) -> Tensor", "parameter 'n'", "1.5")
def default_wrong_type_float_for_int(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, n: int = 1.5) -> Tensor:  # type: ignore[assignment]
            return x + 1


@case("cpu", "Bad.cpu(x: Tensor, dtype: torch.dtype = 'float32') -> Tensor", "parameter 'dtype'", "'float32'")
def default_wrong_type_str_for_dtype(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, dtype: torch.dtype = "float32") -> Tensor:  # type: ignore[assignment]
            return x.to(dtype)


# ---- autograd hooks


@case("backward", "Bad.backward(ctx, grad): is defined without 'setup_context'", "define both backward and setup_context, or neither")
def backward_without_setup_context(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case("setup_context", "Bad.setup_context(ctx, inputs, output): is defined without 'backward'", "define both setup_context and backward, or neither")
def setup_context_without_backward(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass


@case("setup_context", "Bad.setup_context(ctx, inputs, output): the op mutates out", "autograd formulas are only for functional ops", "make a functional op")
def autograd_on_mutable_op(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("out",)):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad, None


@case("setup_context", "Bad.setup_context(ctx, inputs, output): an op tagged torch.Tag.out cannot have an autograd formula", "remove setup_context and backward")
def autograd_on_out_op(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            return out.copy_(x)

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case("backward", "Bad.backward(ctx, grad, extra): takes ctx and 2 gradients, but the op has 1 output, so backward receives 1 gradient", "write backward(ctx, grad0)")
def backward_too_many_grads(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad, extra):  # type: ignore[no-untyped-def]
            return grad


@case("backward", "Bad.backward(ctx, grad): takes ctx and 1 gradient, but the op has 2 outputs, so backward receives 2 gradients", "write backward(ctx, grad0, grad1)")
def backward_too_few_grads(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> tuple[Tensor, Tensor]:
            return x + 1, x - 1

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case("setup_context", "Bad.setup_context(ctx, inputs): takes (ctx, inputs)", "write setup_context(ctx, inputs, output)")
def setup_context_missing_output(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def setup_context(ctx, inputs):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case("setup_context", "Bad.setup_context(ctx, output, inputs): takes (ctx, output, inputs)", "write setup_context(ctx, inputs, output)")
def setup_context_swapped_params(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def setup_context(ctx, output, inputs):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case(
    "setup_context",
    "Bad.setup_context(ctx, inputs, output): the op has keyword-only arguments, which setup_context would not see",
    "write setup_context(ctx, inputs, keyword_only_inputs, output)",
)
def setup_context_without_keyword_only_inputs(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor, *, scale: float = 1.0) -> Tensor:
            return x * scale

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


@case("vmap", "Bad.vmap(info, x): takes 2 positional parameters", "write vmap(info, in_dims, x)")
def vmap_wrong_arity(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def vmap(info, x):  # type: ignore[no-untyped-def]
            return x + 1, 0


# ---- mutates_args


@case(None, "class ", "Bad: mutates_args names 'ot', which is not a parameter (x, out)", "did you mean 'out'?")
def mutates_unknown_parameter(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("ot",)):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)


@case(None, "mutates_args names 'buffer', which is not a parameter (x, out)", "list parameter names only")
def mutates_unrelated_parameter(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("buffer",)):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)


@case(None, "Bad: mutates_args='out' is a string, not a collection of names", "write mutates_args=('out',), or mutates_args='unknown' for every Tensor argument")
def mutates_bare_string(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args="out"):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)


@case(None, "mutates_args=(0,) must be parameter names", "write e.g. mutates_args=('out',)")
def mutates_not_names(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=(0,)):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> None:
            out.copy_(x)


@case("cpu", "Bad.cpu(x: Tensor, n: int) -> None: mutates_args names 'n', which is SymInt, not a Tensor", "remove 'n' from mutates_args")
def mutates_non_tensor(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("n",)):
        @staticmethod
        def cpu(x: Tensor, n: int) -> None:
            pass


# ---- Tag.inplace / Tag.out


@case("cpu", "Bad.cpu(x: Tensor, y: Tensor) -> Tensor: Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", "set mutates_args=(first parameter name,)")
def inplace_mutates_wrong_arg(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("y",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor, y: Tensor) -> Tensor:
            return x


@case("cpu", "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated")
def inplace_without_mutates_args(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.add_(1)


@case("cpu", "Bad.cpu(x: Tensor) -> None: Tag.inplace needs the return annotation -> Tensor", "return the mutated first argument")
def inplace_wrong_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor) -> None:
            x.add_(1)


@case("cpu", "Bad.cpu(x: Tensor, out: Tensor) -> Tensor: Tag.out needs 'out' to be a keyword-only Tensor", "write it after '*' as out: Tensor")
def out_not_keyword_only(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, out: Tensor) -> Tensor:
            return out.copy_(x)


@case("cpu", "Bad.cpu(x: Tensor, *, out: Tensor) -> None: Tag.out needs the return annotation to match the out arguments ('out',)", "annotate the return as Tensor")
def out_wrong_return(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("out",), tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> None:
            out.copy_(x)


@case("cpu", "Tag.out needs at least one keyword-only Tensor in mutates_args", "mutates_args=('out',)")
def out_without_mutates_args(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", tags=torch.Tag.out):
        @staticmethod
        def cpu(x: Tensor, *, out: Tensor) -> Tensor:
            return out.copy_(x)


@case(None, "torch.Tag.inplace and torch.Tag.out are mutually exclusive", "pick one")
def inplace_and_out(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates_args=("x",), tags=(torch.Tag.inplace, torch.Tag.out)):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.add_(1)


@case(None, "tags='inplace' must be torch.Tag values", "tags=torch.Tag.")
def tags_not_tags(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", tags="inplace"):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "pt2_compliant=False with torch.Tag.pt2_compliant_tag in tags=", "drop one of the two")
def pt2_compliant_contradicted(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", tags=torch.Tag.pt2_compliant_tag, pt2_compliant=False):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "pt2_compliant='no' must be True or False", "write pt2_compliant=False")
def pt2_compliant_not_bool(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", pt2_compliant="no"):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


# ---- names


@case(None, "op name 'bad_op' has no namespace", "write name='mylib::bad_op' or subclass a base with namespace='mylib'", op=None)
def name_without_namespace(ns: str) -> None:
    class Bad(CustomOp, name="bad_op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "op name 'bad' has no namespace", op=None)
def class_name_without_namespace(ns: str) -> None:
    class Bad(CustomOp):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "namespace 'my-lib' in 'my-lib::op' is not a valid identifier", "use letters, digits and underscores", op=None)
def name_bad_namespace_characters(ns: str) -> None:
    class Bad(CustomOp, name="my-lib::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "op name 'op-x' in", "is not a valid identifier", "use letters, digits and underscores", op="op_x")
def name_bad_op_characters(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::op-x"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "overload name '1x' in", "is not a valid identifier", op="op")
def name_bad_overload(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::op.1x"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "op name '' in", "is not a valid identifier", op=None)
def name_empty_op(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "namespace 'aten' belongs to PyTorch", "use your project's name as the namespace", op=None)
def name_reserved_namespace(ns: str) -> None:
    class Bad(CustomOp, name="aten::opclass_test_foo"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "namespace='my-lib' is not a valid namespace", "use a Python identifier such as 'mylib'", op=None)
def namespace_keyword_bad(ns: str) -> None:
    class Bad(CustomOp, namespace="my-lib"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "name=3 must be a string", "name='mylib::my_op'", op=None)
def name_not_a_string(ns: str) -> None:
    class Bad(CustomOp, name=3):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1



@case(None, "class Bad: unknown class keyword mutates=('x',)", "did you mean 'mutates_args'?", op=None)
def unknown_class_keyword(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", mutates=("x",)):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor) -> None:
            x.zero_()


@case(None, "unknown class keyword overload='x'", "the class keywords are name, namespace, mutates_args, schema, tags", op=None)
def unknown_class_keyword_no_guess(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", overload="x"):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


# ---- schema=


@case(
    "cpu",
    "Bad.cpu(x: Tensor, n: int) -> Tensor: disagrees with schema='(Tensor x, float n) -> Tensor'",
    "parameter 'n' is float vs int",
    "make the annotations match the schema, or drop them",
)
def schema_disagrees_with_annotations(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, float n) -> Tensor"):
        @staticmethod
        def cpu(x: Tensor, n: int) -> Tensor:
            return x * n


@case("cpu", "disagrees with schema='(Tensor x, Tensor y) -> Tensor'", "2 vs 1 parameters")
def schema_disagrees_on_arity(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, Tensor y) -> Tensor"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case(None, "schema='(Tensor(a!) x) -> ()' mutates ['x'] but mutates_args=()", "mark exactly the mutated arguments with (a!)")
def schema_mutates_but_mutates_args_empty(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor(a!) x) -> ()", mutates_args=()):
        @staticmethod
        def cpu(x):  # type: ignore[no-untyped-def]
            x.add_(1)


@case(None, "schema='(Tensor x, Tensor y) -> ()' mutates [] but mutates_args=('y',)", "list them in mutates_args")
def schema_pure_but_mutates_args_given(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, Tensor y) -> ()", mutates_args=("y",)):
        @staticmethod
        def cpu(x, y):  # type: ignore[no-untyped-def]
            y.copy_(x)


@case(None, "schema '(Tensor x -> Tensor' does not parse", "see the schema table in the docs")
def schema_unparseable(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x -> Tensor"):
        @staticmethod
        def cpu(x):  # type: ignore[no-untyped-def]
            return x + 1


@case(None, "schema '(Tnsor x) -> Tensor' does not parse", "unknown type")
def schema_unknown_type(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tnsor x) -> Tensor"):
        @staticmethod
        def cpu(x):  # type: ignore[no-untyped-def]
            return x + 1


@case(None, "schema=42 must be a string", "schema='(Tensor x) -> Tensor'")
def schema_not_a_string(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema=42):  # type: ignore[arg-type]
        @staticmethod
        def cpu(x):  # type: ignore[no-untyped-def]
            return x + 1


@case("cpu", "Bad.cpu(x, scale): its parameters (x, scale) do not match the op's (x, s)", "write cpu(x, s)")
def unannotated_kernel_wrong_names(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, float s) -> Tensor"):
        @staticmethod
        def cpu(x, scale):  # type: ignore[no-untyped-def]
            return x * scale


@case("abstract", "Bad.abstract(x): its parameters (x) do not match the op's (x, s)", "write abstract(x, s)")
def unannotated_abstract_too_few_params(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, float s) -> Tensor"):
        @staticmethod
        def cpu(x, s):  # type: ignore[no-untyped-def]
            return x * s

        @staticmethod
        def abstract(x):  # type: ignore[no-untyped-def]
            return torch.empty_like(x)


@case("cpu", "Bad.cpu(x, s): parameter 's' needs a default (the schema gives s=1.0)", "write cpu(x, s=1.0)")
def unannotated_kernel_missing_default(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, float s=1.0) -> Tensor"):
        @staticmethod
        def cpu(x, s):  # type: ignore[no-untyped-def]
            return x * s


@case("cpu", "Bad.cpu(x, s): parameter 's' must be keyword-only", "write cpu(x, *, s)")
def unannotated_kernel_not_keyword_only(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad", schema="(Tensor x, *, float s) -> Tensor"):
        @staticmethod
        def cpu(x, s):  # type: ignore[no-untyped-def]
            return x * s


@case("abstract", "Bad.abstract(x, y): its parameters (x, y) do not match the op's (x)", "write abstract(x)")
def unannotated_abstract_extra_param(ns: str) -> None:
    """An unannotated hook is checked against the schema the annotated kernel gives."""

    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x, y):  # type: ignore[no-untyped-def]
            return torch.empty_like(x)


# ---- no Tensor inputs


@case("cpu", "Bad.cpu(n: int) -> Tensor: an op with no Tensor inputs cannot pick a device kernel", "add a device: torch.device parameter, or define default")
def no_tensor_inputs_device_kernel(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        @staticmethod
        def cpu(n: int) -> Tensor:
            return torch.zeros(n)


# ---- autocast / torch_dispatch attributes


@case("autocast", "Bad.autocast: torch.int32 is not a floating-point dtype", "use e.g. torch.float16 or torch.bfloat16")
def autocast_integer_dtype(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        autocast = {"cpu": torch.int32}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case("autocast", "Bad.autocast: must map device types to dtypes, got torch.float16", "write autocast = {'cuda': torch.float16}")
def autocast_not_a_mapping(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        autocast = torch.float16

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case("autocast", "Bad.autocast: must map device types to dtypes, got {}")
def autocast_empty(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        autocast: dict[str, torch.dtype] = {}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case("autocast", "Bad.autocast: 'gpu' is not a device type with autocast", "use e.g. 'cpu' or 'cuda'")
def autocast_unknown_device_type(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        autocast = {"gpu": torch.float16}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


class _Mode(TorchDispatchMode):
    pass


@case("torch_dispatch", "Bad.torch_dispatch", "must map Tensor subclasses or TorchDispatchModes to rules", "write torch_dispatch = {MyMode: rule}")
def torch_dispatch_not_a_mapping(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        torch_dispatch = [_Mode]

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case("torch_dispatch", "Bad.torch_dispatch: entry 'mode':", "is not a class and a callable", "map a class to rule(mode_or_cls, func, types, args, kwargs)")
def torch_dispatch_key_not_a_class(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        torch_dispatch = {"mode": lambda mode, func, types, args, kwargs: None}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


@case("torch_dispatch", "entry <class", "_Mode'>: 3 is not a class and a callable")
def torch_dispatch_rule_not_callable(ns: str) -> None:
    class Bad(CustomOp, name=f"{ns}::bad"):
        torch_dispatch = {_Mode: 3}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1


# A case that spells a tag the installed torch lacks (torch 2.11, 2.12: Tag.inplace, Tag.out) is skipped.
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=needs_tag(*tags_in(inspect.getsource(c.build)))) for c in CASES])
def test_broken_definition(ns: str, case: Case) -> None:
    with pytest.raises(OpDefinitionError) as info:
        case.build(ns)
    err = info.value
    message = str(err)
    assert isinstance(err, TypeError)
    assert err.cls_name.split(".")[-1] == "Bad"
    assert "Bad" in message
    assert err.hook == case.hook, message
    assert err.problem and err.problem in message
    if err.fix:
        assert message.endswith("; " + err.fix)
    for fragment in case.fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    if case.op is not None:
        assert not hasattr(getattr(torch.ops, ns), case.op), f"{ns}::{case.op} was registered"


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


# --------------------------------------------------------------------------- definition errors tested on their own


@pytest.mark.parametrize(
    ("schema", "tag_name", "problem"),
    [
        pytest.param("(Tensor(a!) x, Tensor y) -> Tensor", "inplace", "Tag.inplace needs the op to return its first argument", marks=needs_tag("inplace")),
        pytest.param(
            "(Tensor x, Tensor(a!) y) -> Tensor(a!)", "inplace", "Tag.inplace needs the first parameter to be a Tensor that is the only one mutated", marks=needs_tag("inplace")
        ),
        pytest.param("(Tensor x, *, Tensor(a!) out) -> Tensor", "out", "Tag.out needs the op to return its out arguments, in order", marks=needs_tag("out")),
        pytest.param("(Tensor x, Tensor(a!) out) -> Tensor(a!)", "out", "Tag.out needs the mutated arguments to be keyword-only Tensors", marks=needs_tag("out")),
        pytest.param(
            "(Tensor x, *, Tensor(a!) o1, Tensor(b!) o2) -> (Tensor(b!), Tensor(a!))",
            "out",
            "Tag.out needs the op to return its out arguments, in order",
            marks=needs_tag("out"),
        ),
    ],
)
def test_explicit_schema_breaking_tag_rules_is_a_definition_error(ns: str, schema: str, tag_name: str, problem: str) -> None:
    tag = getattr(torch.Tag, tag_name)
    mutated = [part.split()[-1] for part in schema[1 : schema.index(")")].split(",") if "!" in part]
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad", schema=schema, mutates_args=mutated, tags=tag):
            @staticmethod
            def default(*args, **kwargs):
                return args[0]

    assert info.value.problem == f"schema={schema!r}: {problem}"
    assert str(info.value).startswith("class Bad: ")
    assert not hasattr(torch.ops, ns) or not hasattr(getattr(torch.ops, ns), "bad")


def test_unresolvable_nested_string_is_a_definition_error(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def default(xs: list["Tensr"]) -> Tensor:  # noqa: F821 - the typo is the subject
                return xs[0].clone()

    assert "of 'xs' cannot be evaluated (NameError: name 'Tensr' is not defined)" in info.value.problem


def test_kernel_without_the_schemas_default_is_a_definition_error(ns: str) -> None:
    """The dispatcher would leave ``k`` out: the kernel needs its own default."""
    with pytest.raises(OpDefinitionError, match=r"parameter 'k' needs a default \(the schema gives k=2.0\)"):

        class NoDefault(CustomOp, name=f"{ns}::no_default", schema="(Tensor x, float k=2.0) -> Tensor"):
            @staticmethod
            def cpu(x, k):
                return x * k


@pytest.mark.parametrize(
    ("signature", "problem"),
    [
        ("(x, shape: list[float]) -> Tensor", "parameter 'shape' is annotated float[], but the op's schema says List[int]"),
        ("(x, shape) -> list[Tensor]", "the return is annotated Tensor[], but the op returns Tensor"),
        ("(x, size) -> Tensor", "its parameters (x, size) do not match the op's (x, shape)"),
    ],
)
def test_partly_annotated_hook_must_agree_with_the_schema(ns: str, signature: str, problem: str) -> None:
    scope: dict[str, Any] = {"CustomOp": CustomOp, "Tensor": Tensor}
    with pytest.raises(OpDefinitionError) as info:
        exec(  # noqa: S102 - the signature is the subject
            f"class Bad(CustomOp, name='{ns}::bad'):\n"
            f"    @staticmethod\n"
            f"    def cpu(x: Tensor, shape: list[int]) -> Tensor:\n"
            f"        return x.new_zeros(shape)\n"
            f"    @staticmethod\n"
            f"    def abstract{signature}:\n"
            f"        return x\n",
            scope,
        )
    assert problem in info.value.problem
    assert info.value.hook == "abstract"


def test_a_vmap_rule_needs_the_defaults_the_schema_has(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Mul(CustomOp, name=f"{ns}::mul"):
            @staticmethod
            def default(x: Tensor, k: float = 1.0) -> Tensor:
                return x * k

            @staticmethod
            def vmap(info: Any, in_dims: Any, x: Tensor, k: float) -> Any:
                return Mul(x, k), in_dims[0]

    assert str(info.value) == (
        "Mul.vmap(info: Any, in_dims: Any, x: Tensor, k: float) -> Any: parameter 'k' needs a default (the schema gives k=1.0); "
        "write vmap(info, in_dims, x, k=1.0)"
    )


@pytest.mark.parametrize("first", ["self", "ctx", "cls"])
@pytest.mark.parametrize("annotated", [True, False])
def test_a_kernel_written_as_a_method_is_named_so(ns: str, first: str, annotated: bool) -> None:
    source = f"def default({first}, x: Tensor) -> Tensor:" if annotated else f"def default({first}, x):"
    keywords = "" if annotated else ", schema='(Tensor x) -> Tensor'"
    with pytest.raises(OpDefinitionError) as info:
        exec(f"class Neg(CustomOp, name='{ns}::neg'{keywords}):\n    @staticmethod\n    {source}\n        return -x\n", {"CustomOp": CustomOp, "Tensor": Tensor})  # noqa: S102
    text = str(info.value)
    assert text.startswith(f"Neg.default({first}, x"), text
    assert f"its first parameter is {first!r}, which is no argument of the op" in text
    assert f": {first}: Tensor" not in text and "annotate it" not in text  # the fix that made an extra argument
    assert (f"drop {first!r}" if annotated else "write default(x)") in text


def test_a_kernel_without_staticmethod_and_with_self_says_both(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Neg(CustomOp, name=f"{ns}::neg"):
            def default(self, x: Tensor) -> Tensor:
                return -x

    assert str(info.value).endswith("add @staticmethod above the def and drop 'self' (the op's arguments only)")


# --------------------------------------------------------------------------- what survives a failed definition


def _redefine_with_bad_annotation(ns: str) -> None:
    class Good(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def cpu(x: Tensor, y: dict[str, int]) -> Tensor:
            return x * 100


def _redefine_with_misspelt_hook(ns: str) -> None:
    class Good(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 100

        @staticmethod
        def abstarct(x: Tensor) -> Tensor:
            return torch.empty_like(x)


def _redefine_with_lone_backward(ns: str) -> None:
    class Good(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 100

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad


def _redefine_with_bad_autocast(ns: str) -> None:
    class Good(CustomOp, name=f"{ns}::op"):
        autocast = {"cpu": torch.int64}

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 100


def _redefine_with_bad_schema(ns: str) -> None:
    class Good(CustomOp, name=f"{ns}::op", schema="(Tensor x, float y) -> Tensor"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 100


@pytest.mark.parametrize(
    "redefine",
    [_redefine_with_bad_annotation, _redefine_with_misspelt_hook, _redefine_with_lone_backward, _redefine_with_bad_autocast, _redefine_with_bad_schema],
    ids=lambda f: f.__name__.removeprefix("_redefine_with_"),
)
def test_failed_redefinition_keeps_previous_op(ns: str, redefine: Callable[[str], None]) -> None:
    class Good(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x + 1

        @staticmethod
        def abstract(x: Tensor) -> Tensor:
            return torch.empty_like(x)

    op_before = Good.op
    x = torch.arange(3.0)
    with pytest.raises(OpDefinitionError):
        redefine(ns)
    assert Good.schema == "(Tensor x) -> Tensor"
    assert Good.op is op_before
    assert torch.equal(Good(x), x + 1)
    assert torch.equal(getattr(torch.ops, ns).op(x), x + 1)
    assert torch.equal(getattr(torch.ops, ns).op.default(x), x + 1)


def test_name_taken_outside_opclass(ns: str) -> None:
    lib = torch.library.Library(ns, "FRAGMENT")
    try:
        lib.define("taken(Tensor x, int n) -> Tensor")
        lib.impl("taken", lambda x, n: x * n, "CompositeExplicitAutograd")
        with pytest.raises(OpDefinitionError) as info:

            class Bad(CustomOp, name=f"{ns}::taken"):
                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x + 1

        message = str(info.value)
        assert message.startswith("class ") and "Bad:" in message
        assert info.value.hook is None
        assert f"{ns}::taken is already defined outside opclass" in message
        assert "pick another name, or remove the other definition first" in message
        # The other library's op is untouched.
        x = torch.arange(3.0)
        assert str(getattr(torch.ops, ns).taken.default._schema) == f"{ns}::taken(Tensor x, int n) -> Tensor"
        assert torch.equal(getattr(torch.ops, ns).taken(x, 2), x * 2)
    finally:
        lib._destroy()


# --------------------------------------------------------------------------- what is allowed


def test_helpers_with_unrelated_names_are_allowed(ns: str) -> None:
    class Scaled(CustomOp, name=f"{ns}::scaled"):
        factor = 3.0

        @staticmethod
        def _helper(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def compute_scale(x: Tensor) -> float:
            return 0.5

        @classmethod
        def from_config(cls, config: dict[str, Any]) -> Any:
            return cls

        def describe(self) -> str:
            return "a plain method"

        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return Scaled._helper(x) * Scaled.compute_scale(x)

    x = torch.arange(4.0)
    assert Scaled.schema == "(Tensor x) -> Tensor"
    assert torch.equal(Scaled(x), x)
    assert torch.equal(getattr(torch.ops, ns).scaled(x), x)
    assert Scaled.from_config({}) is Scaled
    assert Scaled.factor == 3.0


def test_error_parts_are_attributes(ns: str) -> None:
    with pytest.raises(OpDefinitionError) as info:

        class Bad(CustomOp, name=f"{ns}::bad"):
            @staticmethod
            def cpu(x: Tensor) -> Tensor:
                return x + 1

            @staticmethod
            def abstarct(x: Tensor) -> Tensor:
                return x

    err = info.value
    assert str(err).endswith("Bad.abstarct(x: Tensor) -> Tensor: not a hook; did you mean 'abstract'?")
    assert err.hook == "abstarct"
    assert err.problem == "not a hook"
    assert err.fix == "did you mean 'abstract'?"
    assert err.cls_name.endswith("Bad")
    assert isinstance(err, TypeError)


def test_install_failure_restores_the_previous_op_and_its_class(ns: str) -> None:
    """A hook installer that raises midway: the earlier op is installed again, and its class (whose
    old kernels were released) calls the reinstalled op, with and without grad."""
    from opclass import Hook, register_hook, unregister_hook

    def explode(record: Any, value: Any) -> None:
        raise RuntimeError("installer failed")

    class Good(CustomOp, name=f"{ns}::op"):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
            pass

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            return grad * 2

    register_hook(Hook("explode_on_install", explode))
    try:
        with pytest.raises(RuntimeError, match="installer failed"):

            class Bad(CustomOp, name=f"{ns}::op"):
                explode_on_install = staticmethod(lambda: None)

                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x * 3
    finally:
        unregister_hook("explode_on_install")
    x = torch.arange(3.0, requires_grad=True)
    assert torch.equal(Good(x.detach()), x.detach() * 2)
    assert torch.equal(getattr(torch.ops, ns).op(x.detach()), x.detach() * 2)
    Good(x).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.full((3,), 2.0))


@needs_tag("inplace")
def test_install_failure_restores_an_inplace_op(ns: str) -> None:
    """As above for an op whose fast path calls opclass's checked kernel (Tag.inplace)."""
    from opclass import Hook, register_hook, unregister_hook

    def explode(record: Any, value: Any) -> None:
        raise RuntimeError("installer failed")

    class Good(CustomOp, name=f"{ns}::op_", mutates_args=("x",), tags=torch.Tag.inplace):
        @staticmethod
        def cpu(x: Tensor) -> Tensor:
            return x.mul_(2)

    register_hook(Hook("explode_on_install", explode))
    try:
        with pytest.raises(RuntimeError, match="installer failed"):

            class Bad(CustomOp, name=f"{ns}::op_", mutates_args=("x",), tags=torch.Tag.inplace):
                explode_on_install = staticmethod(lambda: None)

                @staticmethod
                def cpu(x: Tensor) -> Tensor:
                    return x.mul_(3)
    finally:
        unregister_hook("explode_on_install")
    x = torch.ones(3)
    assert Good(x) is x and torch.equal(x, torch.full((3,), 2.0))
    getattr(torch.ops, ns).op_(x)
    assert torch.equal(x, torch.full((3,), 4.0))
