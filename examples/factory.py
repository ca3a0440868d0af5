"""A factory op: no Tensor inputs, so the ``device`` argument picks the kernel.

``NumpyEye`` (``ex_factory::numpy_eye``) builds an ``n x n`` identity matrix with NumPy. It takes
``n``, a ``dtype`` and a ``device``; with no Tensor argument to dispatch on, opclass routes the call
by ``device``: ``cpu`` runs the NumPy kernel, ``meta`` (and FakeTensor, torch.compile, torch.export)
runs the ``abstract`` kernel.

Run it with ``python examples/factory.py``.
"""

from __future__ import annotations

import numpy as np
import torch

from opclass import CustomOp


class NumpyEye(CustomOp, name="ex_factory::numpy_eye"):
    """The n x n identity matrix."""

    @staticmethod
    def cpu(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.from_numpy(np.eye(n)).to(dtype)

    @staticmethod
    def abstract(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(n, n, dtype=dtype, device=device)


def main() -> None:
    eye = NumpyEye(3, torch.float32, torch.device("cpu"))
    torch.testing.assert_close(eye, torch.eye(3))
    assert eye.dtype is torch.float32

    meta = NumpyEye(5, torch.float16, torch.device("meta"))
    assert meta.is_meta and meta.shape == (5, 5) and meta.dtype is torch.float16

    assert NumpyEye.schema == "(SymInt n, ScalarType dtype, Device device) -> Tensor"
    print(f"{NumpyEye.qualname}{NumpyEye.schema}: cpu {tuple(eye.shape)}, meta {tuple(meta.shape)}")


if __name__ == "__main__":
    main()
