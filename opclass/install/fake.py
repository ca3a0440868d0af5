"""The op's fake kernel (FakeTensor, torch.compile, torch.export): a hook's, held to the output
contract, a read of values said as its mistake; and what opclass asks about it (does the op run
under FakeTensor; is an error the "no fake kernel" one; does a kernel need real data).

Example:
    >>> from opclass.install.fake import says_no_fake_kernel, no_fake
    >>> says_no_fake_kernel(no_fake("docs::op has no fake kernel"))
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from opclass.core.tracing import raise_in_trace
from opclass.errors import first_line

if TYPE_CHECKING:
    from opclass.install.record import OpRecord

__all__ = ["register_fake", "no_fake", "says_no_fake_kernel", "has_fake_kernel", "needs_real_data"]

_NO_FAKE = "__opclass_no_fake__"  # marks the fake kernel that only says to define one, and its error


def register_fake(record: OpRecord, fn: Callable[..., Any], where: str | None = None) -> None:
    """``fn`` as the op's fake kernel; ``where`` names a hook's (``"ns::op (Cls.hook)"``), held to the
    real kernels' output contract, its reads of data said as its mistake; ``None``: opclass's own."""
    record.fake, record.fake_where = fn, where
    if where is not None:
        fn = _contract_fake(record, where, fn)
    record.lib._register_fake(record.overload_name(), fn, _stacklevel=1)


def _contract_fake(record: OpRecord, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    finish = record.outputs.finish

    def fake_kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except RuntimeError as e:
            if not _reads_data(e):
                raise
            message = (
                f"{where}: the fake kernel reads a Tensor's values ({first_line(e)}), which FakeTensors do not have: "
                "build the outputs from shapes, dtypes and devices alone; for an output size that depends on the "
                "values, take it from torch.library.get_ctx().new_dynamic_size()"
            )
            raise_in_trace(RuntimeError(message), e)
        try:
            return finish(where, args, kwargs, out)
        except (RuntimeError, TypeError) as e:
            raise_in_trace(e, e.__cause__)  # the contract's own error: said first under torch.compile too

    return fake_kernel


def no_fake(message: str, fake: Callable[..., Any] | None = None) -> RuntimeError:
    """The error of an op with no fake kernel (``says_no_fake_kernel`` knows it); with ``fake``,
    marks that function as the fake kernel that raises it."""
    if fake is not None:
        setattr(fake, _NO_FAKE, True)
    error = RuntimeError(message)
    setattr(error, _NO_FAKE, True)
    return error


def says_no_fake_kernel(error: BaseException) -> bool:
    """``error`` is the one an op with no fake kernel raises on FakeTensors."""
    return getattr(error, _NO_FAKE, False)


def has_fake_kernel(record: OpRecord) -> bool:
    """The op runs under FakeTensor: a fake kernel that computes (a hook's, or one opclass
    generated), or an op defined elsewhere that had its own."""
    return record.existing if record.fake is None else not getattr(record.fake, _NO_FAKE, False)


def _reads_data(e: BaseException) -> bool:
    """The error is FakeTensor's for a read of values it does not have (``.item()``, ``bool(x)``)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return isinstance(e, (DataDependentOutputException, GuardOnDataDependentSymNode))


def needs_real_data(e: BaseException) -> bool:
    """The error says a kernel needs values or storage that fake tensors do not have (it calls
    NumPy, reads values, makes a data-dependent shape, or runs an op with no fake kernel)."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, UnsupportedOperatorException

    if _reads_data(e) or isinstance(e, (DynamicOutputShapeException, UnsupportedOperatorException)):
        return True
    # NumPy (.numpy(), np.asarray), data pointers and storage of fake/meta tensors, an op with no Meta kernel.
    text = str(e)
    return isinstance(e, (RuntimeError, NotImplementedError, TypeError)) and any(
        s in text for s in (".numpy()", "data pointer", "storage", "'Meta' backend", "meta tensor", "Meta tensor", "FakeTensor")
    )
