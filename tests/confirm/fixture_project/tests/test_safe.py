from __future__ import annotations

import pytest
import torch

from app import legacy, safe  # noqa: F401  (legacy: imported, never called)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_shifted():
    x = torch.arange(4.0, device="cuda")
    assert safe.shifted(x).tolist() == [1.0, 3.0, 5.0, 7.0]


@pytest.mark.parametrize("n", [1, 3])
def test_shifted_sizes(n):
    assert safe.shifted(torch.zeros(n, device="cuda")).tolist() == [1.0] * n
