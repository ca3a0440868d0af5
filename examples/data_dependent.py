"""An op whose output shape depends on the input's *values*: a NumPy ``nonzero``.

``NumpyNonzero`` (``ex_dynamic::numpy_nonzero``) returns the ``(k, ndim)`` indices of the non-zero
elements of ``x``. The fake kernel cannot know ``k`` without reading data, so it asks for a fresh
symbolic size with ``torch.library.get_ctx().new_dynamic_size()``; torch.compile and torch.export
then carry ``k`` as an unbacked symbol.

Run it with ``python examples/data_dependent.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from opclass import CustomOp


class NumpyNonzero(CustomOp, name="ex_dynamic::numpy_nonzero"):
    """Indices of the non-zero elements, one row per element."""

    @staticmethod
    def cpu(x: Tensor) -> Tensor:
        torch._check(x.dim() > 0, lambda: "numpy_nonzero needs at least one dimension")
        indices = np.stack(np.nonzero(x.numpy()), axis=1)
        return torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))

    @staticmethod
    def abstract(x: Tensor) -> Tensor:
        torch._check(x.dim() > 0, lambda: "numpy_nonzero needs at least one dimension")
        ctx = torch.library.get_ctx()
        k = ctx.new_dynamic_size()  # data-dependent: 0 <= k (upper bound not known)
        return x.new_empty(k, x.dim(), dtype=torch.int64)


def main() -> None:
    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    idx = NumpyNonzero(x)
    assert torch.equal(idx, torch.nonzero(x))

    compiled = torch.compile(lambda t: NumpyNonzero(t) * 1, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), torch.nonzero(x))

    # A FakeTensorMode needs a ShapeEnv to make up the symbolic row count.
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()):
        fake = NumpyNonzero(torch.empty(4, 4))
    k = fake.shape[0]
    assert isinstance(k, torch.SymInt), f"expected a symbolic row count, got {k!r}"

    print(f"{NumpyNonzero.qualname}{NumpyNonzero.schema}: {idx.shape[0]} non-zeros; fake shape ({k}, {fake.shape[1]})")


if __name__ == "__main__":
    main()
