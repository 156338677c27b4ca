from __future__ import annotations

import pytest
import torch

from app import racy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_shifted():
    x = torch.arange(4.0, device="cuda")
    assert racy.shifted(x).tolist() == [1.0, 3.0, 5.0, 7.0]


def test_race_in_unlinted_code():
    """A runtime-only race: in code the static pass was not asked to look at (the tests)."""
    x = torch.ones(4, device="cuda")
    side = torch.cuda.Stream()
    y = x * 3
    with torch.cuda.stream(side):
        z = y - 1
    torch.cuda.current_stream().wait_stream(side)
    assert z.tolist() == [2.0] * 4
