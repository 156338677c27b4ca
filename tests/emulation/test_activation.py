"""Entering and leaving the emulation: torch is given back exactly, and GPU suites that guard
themselves at import time run when the emulation is active before collection."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.cuda.graphs
import torch.cuda.memory
import torch.cuda.nvtx
import torch.cuda.streams
from torch.utils._python_dispatch import _get_current_dispatch_mode

from csan_lint.runtime import emulation

_PATCHED_NAMESPACES = (
    torch,
    torch.cuda,
    torch.cuda.streams,
    torch.cuda.graphs,
    torch.cuda.memory,
    torch.cuda.nvtx,
    torch.Tensor,
    torch.UntypedStorage,
    threading.Thread,
    torch.amp.autocast_mode.autocast,
)


def _snapshot() -> list[dict[str, object]]:
    return [dict(vars(namespace)) for namespace in _PATCHED_NAMESPACES]


def test_deactivate_restores_every_attribute_exactly():
    originals = (torch.cuda.Stream, torch.cuda.Event, torch.cuda.CUDAGraph, torch.cuda.is_available, torch.tensor)
    before = _snapshot()
    emulation.activate()
    try:
        assert torch.cuda.Stream is not originals[0]
        assert "device" in vars(torch.Tensor)
        assert emulation.is_active()
    finally:
        emulation.deactivate()
    after = _snapshot()
    for namespace, old, new in zip(_PATCHED_NAMESPACES, before, after, strict=True):
        assert old.keys() == new.keys(), namespace
        changed = [name for name in old if old[name] is not new[name]]
        assert changed == [], (namespace, changed)
    assert (
        torch.cuda.Stream,
        torch.cuda.Event,
        torch.cuda.CUDAGraph,
        torch.cuda.is_available,
        torch.tensor,
    ) == originals
    assert torch.cuda.streams.Stream is originals[0]
    assert "device" not in vars(torch.Tensor) and "to" not in vars(torch.Tensor)
    assert not emulation.is_active()


def test_after_deactivate_no_device_tensors_and_no_mode_left():
    with emulation.emulated():
        x = torch.ones(2, device="cuda")
        assert x.is_cuda and torch.cuda.is_available()
    assert _get_current_dispatch_mode() is None
    assert not torch.cuda.is_available()
    assert not x.is_cuda and x.device == torch.device("cpu")
    with pytest.raises((RuntimeError, AssertionError, NotImplementedError)):
        torch.zeros(1, device="cuda")
    with pytest.raises((RuntimeError, AssertionError, TypeError)):
        torch.cuda.Stream()


def test_activation_is_idempotent_and_a_fresh_activation_starts_clean():
    with emulation.emulated():
        with emulation.emulated():
            first = torch.cuda.Stream()
        assert emulation.is_active()  # the inner block did not switch it off
    with emulation.emulated():
        # A fresh device: the pool starts over, the current stream is the default one.
        assert torch.cuda.Stream().cuda_stream == first.cuda_stream
        assert torch.cuda.current_stream().cuda_stream == 0


def test_deactivate_refuses_with_a_foreign_mode_above_it():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    emulation.activate()
    try:
        with Passthrough():
            with pytest.raises(RuntimeError, match="another TorchDispatchMode"):
                emulation.deactivate()
            assert torch.ones(1, device="cuda").is_cuda
    finally:
        emulation.deactivate()
    assert not emulation.is_active()


def test_threads_started_after_deactivate_are_plain():
    with emulation.emulated():
        pass
    result = {}
    thread = threading.Thread(target=lambda: result.update(mode=_get_current_dispatch_mode()))
    thread.start()
    thread.join()
    assert result == {"mode": None}


GUARDED_MODULE = """
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_on_gpu():
    side = torch.cuda.Stream()
    x = torch.ones(3, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    assert y.sum().item() == 6.0
"""

ACTIVATING_CONFTEST = """
from csan_lint.runtime import emulation


def pytest_configure(config):
    emulation.activate()


def pytest_unconfigure(config):
    emulation.deactivate()
"""


def test_guarded_gpu_module_runs_when_activated_before_collection(pytester: pytest.Pytester):
    pytester.makepyfile(test_gpu=GUARDED_MODULE)
    pytester.makeconftest(ACTIVATING_CONFTEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not emulation.is_active()


def test_guarded_gpu_module_is_skipped_without_the_emulation(pytester: pytest.Pytester):
    pytester.makepyfile(test_gpu=GUARDED_MODULE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)


def test_a_thread_that_outlives_the_emulation_gets_plain_torch():
    started, stopped, done = threading.Event(), threading.Event(), {}

    def worker():
        assert torch.ones(1, device="cuda").is_cuda
        started.set()
        stopped.wait(10)
        try:
            torch.zeros(1, device="cuda")
        except (RuntimeError, AssertionError, NotImplementedError):
            done["refused"] = True

    emulation.activate()
    thread = threading.Thread(target=worker)
    try:
        thread.start()
        assert started.wait(10)
    finally:
        emulation.deactivate()
    stopped.set()
    thread.join()
    assert done == {"refused": True}


def test_events_of_an_earlier_activation_die_silently_and_handles_never_repeat():
    from torch.cuda import _gpu_trace

    with emulation.emulated():
        old = torch.cuda.Event()
        old.record()
        old_handle = old.cuda_event
    deleted = []
    _gpu_trace.EventDeletionCallbacks.add_callback(deleted.append)
    try:
        with emulation.emulated():
            new = torch.cuda.Event()
            new.record()
            assert new.cuda_event != old_handle
            del old
            assert deleted == []
            new_handle = new.cuda_event
            del new
            assert deleted == [new_handle]
    finally:
        _gpu_trace.EventDeletionCallbacks.callback_list.remove(deleted.append)
