from __future__ import annotations

import pytest
import torch

from app import legacy, safe

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_shifted():
    x = torch.arange(4.0, device="cuda")
    assert safe.shifted(x).tolist() == [1.0, 3.0, 5.0, 7.0]


@pytest.mark.parametrize("n", [1, 3])
def test_shifted_sizes(n):
    assert safe.shifted(torch.zeros(n, device="cuda")).tolist() == [1.0] * n


@pytest.mark.csan(enabled=False)
def test_unchecked_run_of_legacy():
    """Runs legacy.py with the sanitizer off: that must not count as a clean, checked run."""
    assert legacy.old_shifted(torch.zeros(1, device="cuda")).tolist() == [1.0]
