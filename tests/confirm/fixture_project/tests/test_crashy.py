from __future__ import annotations

import os
import signal

import pytest
import torch

from app import crashy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_shifted_then_dies():
    crashy.shifted(torch.ones(2, device="cuda"))
    os.kill(os.getpid(), signal.SIGKILL)  # what an OOM kill or a driver abort looks like


def test_after_the_crash_still_runs():
    assert torch.ones(1, device="cuda").item() == 1.0
