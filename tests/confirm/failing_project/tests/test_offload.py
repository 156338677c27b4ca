"""One test per way of not passing; none races."""

from __future__ import annotations

import pytest
import torch
from torch.cuda import _gpu_trace

from app.offload import offloaded

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_passes():
    assert offloaded(torch.ones(2, device="cuda")).tolist() == [1.0, 1.0]


def test_own_failure():
    offloaded(torch.ones(2, device="cuda"))
    raise ValueError("the test's own bug\nsecond line, not shown")


def test_fails_only_under_the_sanitizer():
    offloaded(torch.ones(2, device="cuda"))
    # Stands for code that behaves differently when the sanitizer listens: it registers callbacks.
    assert not _gpu_trace.EventRecordCallbacks.callback_list, "the sanitizer is listening"


def test_emulation_gap():
    event = torch.cuda.Event(interprocess=True)
    event.record()
    offloaded(torch.ones(2, device="cuda"))
    event.ipc_handle()
