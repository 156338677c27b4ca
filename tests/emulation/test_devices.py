"""An emulated machine of several devices (`CSAN_LINT_DEVICES`, `--csan-devices`): each device
has its own default stream, pool streams and current stream, each thread a current device, and
multi-GPU code runs as on a machine with that many GPUs, checked by the sanitizer."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime import emulation
from csan_lint.runtime.emulation.machine import DEVICES_VARIABLE
from csan_lint.runtime.sanitizer import Sanitizer


@pytest.fixture
def two_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(DEVICES_VARIABLE, "2")
    emulation.activate()
    try:
        yield
    finally:
        emulation.deactivate()


def test_one_device_by_default_and_cuda_1_is_an_invalid_ordinal(device: None) -> None:
    assert torch.cuda.device_count() == 1
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(2, device="cuda:1")
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.cuda.set_device(1)


def test_a_bad_device_count_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICES_VARIABLE, "two")
    with pytest.raises(ValueError, match="CSAN_LINT_DEVICES: expected a number of devices"):
        emulation.activate()
    assert not emulation.is_active()


@pytest.mark.usefixtures("two_devices")
def test_tensors_on_cuda_1_report_their_device_and_move_between_devices() -> None:
    assert torch.cuda.device_count() == 2
    x = torch.arange(4.0, device="cuda:1")
    assert x.device == torch.device("cuda", 1) and x.device.index == 1 and x.get_device() == 1
    assert (x + 1).device.index == 1 and x.untyped_storage().device.index == 1
    assert torch.ones(2, device="cuda").device.index == 0  # the current device
    y = x.to("cuda:0")
    assert y.device.index == 0 and y.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert y.cuda(1).get_device() == 1 and y.to(1).get_device() == 1
    assert torch.tensor([1, 2], device=torch.device("cuda", 1)).get_device() == 1
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:1 and cuda:0"):
        x + y
    z = torch.zeros(4, device="cuda:1")
    z.copy_(y)  # a copy between devices
    assert z.get_device() == 1 and z.tolist() == y.tolist()


@pytest.mark.usefixtures("two_devices")
def test_the_current_device_follows_device_contexts_and_set_device() -> None:
    assert torch.cuda.current_device() == 0
    with torch.cuda.device(1):
        assert torch.cuda.current_device() == 1
        assert torch.ones(1, device="cuda").get_device() == 1
        assert torch.ones(1).cuda().get_device() == 1
    assert torch.cuda.current_device() == 0
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1 and torch.cuda.current_stream().device_index == 1
    torch.cuda.set_device(0)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(1, device="cuda:2")


@pytest.mark.usefixtures("two_devices")
def test_each_device_has_its_own_default_and_current_stream() -> None:
    default0, default1 = torch.cuda.default_stream(0), torch.cuda.default_stream(1)
    assert default0.cuda_stream == default1.cuda_stream == 0  # handle 0 on every GPU
    assert default0 != default1 and default1.device == torch.device("cuda", 1)
    side = torch.cuda.Stream(device=1)
    assert side.device_index == 1 and side.cuda_stream != torch.cuda.Stream(device=0).cuda_stream
    with torch.cuda.stream(side):  # as torch: device 1 current, with its stream `side`
        assert torch.cuda.current_device() == 1
        assert torch.cuda.current_stream() == side == torch.cuda.current_stream(1)
        assert torch.cuda.current_stream(0) == default0
    assert torch.cuda.current_device() == 0
    assert torch.cuda.current_stream(1) == default1
    with side:
        assert torch.cuda.current_stream(1) == side
    assert torch.cuda.current_stream(1) == default1


@pytest.mark.usefixtures("two_devices")
def test_trace_callbacks_name_a_default_stream_0_under_its_device() -> None:
    seen: list[tuple[int, int]] = []

    def recorded(event: int, stream: int) -> None:
        seen.append((stream, torch.cuda.current_device()))

    _gpu_trace.EventRecordCallbacks.add_callback(recorded)
    try:
        torch.cuda.default_stream(1).record_event()
        torch.cuda.default_stream(0).record_event()
    finally:
        _gpu_trace.EventRecordCallbacks.callback_list.remove(recorded)
    assert seen == [(0, 1), (0, 0)]
    assert torch.cuda.current_device() == 0


@pytest.mark.usefixtures("two_devices")
def test_memory_statistics_are_per_device() -> None:
    before = torch.cuda.memory_allocated(0)
    x = torch.empty(1024, device="cuda:1")
    assert torch.cuda.memory_allocated(1) >= x.nbytes
    assert torch.cuda.memory_allocated(0) == before
    assert len(torch.cuda.get_rng_state_all()) == 2


@pytest.mark.usefixtures("two_devices")
def test_every_spelling_of_a_move_to_device_1_lands_there_with_the_bytes() -> None:
    host = torch.arange(4.0)
    on_0 = host.to("cuda:0")
    for source in (host, on_0):
        moved = [
            source.cuda(1),
            source.to("cuda:1"),
            source.to(torch.device("cuda", 1)),
            source.to(1),
            source.to(device=1, dtype=torch.float64),
        ]
        assert [tensor.get_device() for tensor in moved] == [1] * 5
        assert all(tensor.tolist() == [0.0, 1.0, 2.0, 3.0] for tensor in moved)


@pytest.mark.usefixtures("two_devices")
def test_storages_move_to_device_k_as_torchs_storage_to_does() -> None:
    values = torch.arange(4.0)
    before = torch.cuda.memory_allocated(1)
    for storage in (values.untyped_storage(), values.to("cuda:0").untyped_storage()):
        moved = [storage.cuda(1), storage.to(device="cuda:1"), storage.to(device=torch.device("cuda", 1))]
        assert [copy.device for copy in moved] == [torch.device("cuda", 1)] * 3
        assert all(
            torch.tensor([], device="cuda:1").set_(copy).view(torch.float32).tolist() == values.tolist()
            for copy in moved
        )
    assert torch.cuda.memory_allocated(1) > before  # device 1's allocator holds the copies
    on_1 = values.to("cuda:1").untyped_storage()
    assert on_1.cuda(1) is on_1 and on_1.to(device="cuda:1") is on_1  # already there: itself
    assert on_1.cuda(0).device == torch.device("cuda", 0)
    typed = values.storage().cuda(1)  # the legacy TypedStorage goes through the untyped one
    assert typed.device == torch.device("cuda", 1) and typed.tolist() == values.tolist()
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        values.untyped_storage().cuda(2)


@pytest.mark.usefixtures("two_devices")
def test_each_device_has_its_own_generator_seeded_as_cudas() -> None:
    torch.cuda.manual_seed_all(3)  # every device: the same seed gives the same draws
    assert torch.equal(torch.rand(5, device="cuda:0").cpu(), torch.rand(5, device="cuda:1").cpu())
    state_1 = torch.cuda.get_rng_state(device=1)
    torch.cuda.manual_seed(5)  # the current device only
    assert torch.equal(torch.cuda.get_rng_state(device=1), state_1)
    assert not torch.equal(torch.cuda.get_rng_state(0), state_1)
    assert (torch.cuda.initial_seed(), torch.cuda.current_device()) == (5, 0)
    with torch.cuda.device(1):
        assert torch.cuda.initial_seed() == 3
        torch.cuda.manual_seed(9)
    assert torch.cuda.initial_seed() == 5
    state_0 = torch.cuda.get_rng_state("cuda:0")
    first = torch.randn(4, device="cuda:1").cpu()  # device 1's draw leaves device 0's state
    assert torch.equal(torch.cuda.get_rng_state(0), state_0)
    torch.cuda.set_rng_state(torch.cuda.get_rng_state(1), device=1)
    torch.cuda.manual_seed(9)  # device 0 now seeded as device 1 was: draws as it drew
    assert torch.equal(torch.randn(4, device="cuda:0").cpu(), first)
    with torch.cuda.device(1):
        torch.cuda.manual_seed(11)
    states = torch.cuda.get_rng_state_all()
    draws = [torch.rand(3, device=f"cuda:{index}").cpu() for index in (0, 1)]
    torch.cuda.set_rng_state_all(states)
    assert all(torch.equal(torch.rand(3, device=f"cuda:{index}").cpu(), draws[index]) for index in (0, 1))
    assert not torch.equal(draws[0], draws[1])
    generator = torch.Generator(device="cuda:1")  # a generator of one's own reports its device
    with torch.cuda.device(1):
        assert generator.device == torch.Generator(device="cuda").device == torch.device("cuda", 1)
    generator.manual_seed(4)
    first = torch.randn(3, device="cuda:1", generator=generator).cpu()
    generator.manual_seed(4)
    assert torch.equal(torch.randn(3, device="cuda:1", generator=generator).cpu(), first)


@pytest.mark.usefixtures("two_devices")
def test_a_copy_between_devices_fires_copy_cus_two_way_barrier_on_the_current_streams() -> None:
    # cuda_semantics.COPY_BETWEEN_DEVICES: the destination's current stream records, the source's
    # waits; the copy; the source's records, the destination's waits (each under its device).
    fired: list[tuple[str, int, int, int]] = []  # (callback, event, stream handle, device)

    def recorded(event: int, stream: int) -> None:
        fired.append(("record", event, stream, torch.cuda.current_device()))

    def waited(event: int, stream: int) -> None:
        fired.append(("wait", event, stream, torch.cuda.current_device()))

    source = torch.ones(8, device="cuda:0")
    side_0, side_1 = torch.cuda.Stream(device=0), torch.cuda.Stream(device=1)
    _gpu_trace.EventRecordCallbacks.add_callback(recorded)
    _gpu_trace.EventWaitCallbacks.add_callback(waited)
    try:
        with torch.cuda.stream(side_1), torch.cuda.stream(side_0):  # both devices' current streams
            moved = source.to("cuda:1")
        torch.cuda.synchronize()
    finally:
        _gpu_trace.EventRecordCallbacks.callback_list.remove(recorded)
        _gpu_trace.EventWaitCallbacks.callback_list.remove(waited)
    assert moved.get_device() == 1
    (_, before, *first), (_, before_waited, *second), (_, after, *third), (_, after_waited, *fourth) = fired
    assert (before, after) == (before_waited, after_waited) and before != after
    handle_0, handle_1 = side_0.cuda_stream, side_1.cuda_stream
    assert [first, second, third, fourth] == [[handle_1, 1], [handle_0, 0], [handle_0, 0], [handle_1, 1]]


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("index", [0, 1])
def test_checkpoint_recomputes_dropout_with_the_devices_saved_random_state(index: int) -> None:
    # torch.utils.checkpoint saves each device's state (only once torch.cuda is initialized) and
    # restores it for the recomputation: the same mask, the same gradient.
    from torch.utils.checkpoint import checkpoint

    def dropout(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * 2, 0.5, training=True)

    x = torch.randn(256, device=f"cuda:{index}", requires_grad=True)
    torch.cuda.manual_seed_all(1)
    dropout(x).sum().backward()
    assert x.grad is not None
    plain, x.grad = x.grad, None
    torch.cuda.manual_seed_all(1)
    checkpoint(dropout, x, use_reentrant=False).sum().backward()
    assert x.grad is not None and x.grad.get_device() == index
    assert torch.equal(x.grad.cpu(), plain.cpu()) and 0 < int((plain == 0).sum()) < 256


# -- under the sanitizer ---------------------------------------------------------------------


def _kinds(sanitizer: Sanitizer) -> list[str]:
    return [report.kind for report in sanitizer.errors]


@pytest.mark.usefixtures("two_devices")
def test_a_race_between_device_1s_side_stream_and_its_default_stream_is_reported() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:1")
        side = torch.cuda.Stream(device=1)
        with torch.cuda.stream(side):
            x.mul_(2)
        assert _kinds(sanitizer) == ["write-after-write"]


@pytest.mark.usefixtures("two_devices")
def test_ops_on_cuda_1_run_on_device_1s_current_stream_not_device_0s() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:1")
        side0 = torch.cuda.Stream(device=0)
        with torch.cuda.stream(side0):  # device 0's stream: an op on cuda:1 is not on it
            x.mul_(2)  # device 1's default stream, where x was made: ordered
        side1 = torch.cuda.Stream(device=1)
        side1.wait_stream(torch.cuda.default_stream(1))
        with torch.cuda.stream(side1):
            x.add_(1)
        torch.cuda.default_stream(1).wait_stream(side1)
        x.sum()
        assert sanitizer.errors == []


@pytest.mark.usefixtures("two_devices")
def test_default_streams_of_two_devices_are_not_ordered_with_each_other() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:0")
        side = torch.cuda.Stream(device=0)
        side.wait_stream(torch.cuda.default_stream(0))
        with torch.cuda.stream(side):
            x.mul_(2)
        torch.cuda.default_stream(1).wait_stream(side)  # device 1's default, not device 0's
        x.add_(1)
        assert _kinds(sanitizer) == ["write-after-write"]


@pytest.mark.usefixtures("two_devices")
def test_a_device_sync_orders_only_its_own_devices_streams() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:1")
        side = torch.cuda.Stream(device=1)
        side.wait_stream(torch.cuda.default_stream(1))
        with torch.cuda.stream(side):
            x.mul_(2)
        torch.cuda.synchronize(0)
        x.add_(1)  # device 1's default stream: device 0's sync did not order it
        assert _kinds(sanitizer) == ["write-after-write"]
        side.wait_stream(torch.cuda.default_stream(1))
        with torch.cuda.stream(side):
            x.mul_(2)
        torch.cuda.synchronize(1)
        x.add_(1)
        assert _kinds(sanitizer) == ["write-after-write"]


@pytest.mark.usefixtures("two_devices")
def test_a_copy_between_devices_is_ordered_on_both_sides() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:0")
        y = x.to("cuda:1")
        y.add_(1)  # device 1's default stream waits for the copy
        x.mul_(2)  # device 0's default stream ran the copy
        z = torch.empty(64, device="cuda:0")
        z.copy_(y)
        z.sum(), y.sum()
        assert sanitizer.errors == []
        assert z.tolist() == [2.0] * 64


@pytest.mark.usefixtures("two_devices")
def test_a_copy_from_a_tensor_written_on_an_unordered_side_stream_is_reported() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:0")
        side = torch.cuda.Stream(device=0)
        side.wait_stream(torch.cuda.default_stream(0))
        with torch.cuda.stream(side):
            x.mul_(2)
        x.to("cuda:1")  # read on device 0's default stream
        assert _kinds(sanitizer) == ["read-after-write"]


@pytest.mark.usefixtures("two_devices")
def test_a_copy_between_devices_orders_only_the_two_current_streams() -> None:
    # Copy.cu: the source's current stream waits for the destination's current stream, not for
    # its other streams: a read of the destination on device 1's side stream races the copy.
    with Sanitizer(device="emulated") as sanitizer:
        source = torch.ones(64, device="cuda:0")
        destination = torch.zeros(64, device="cuda:1")
        side = torch.cuda.Stream(device=1)
        side.wait_stream(torch.cuda.default_stream(1))
        with torch.cuda.stream(side):
            destination.sum()
        destination.copy_(source)
        assert _kinds(sanitizer) == ["write-after-read"]


@pytest.mark.usefixtures("two_devices")
def test_a_copy_into_device_1_waits_for_its_current_streams_reads_and_orders_later_use() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        source = torch.ones(64, device="cuda:0")
        destination = torch.zeros(64, device="cuda:1")
        side = torch.cuda.Stream(device=1)
        side.wait_stream(torch.cuda.default_stream(1))
        with torch.cuda.stream(side):  # device 1's current stream while the copy is issued
            destination.sum()
            destination.copy_(source)
            destination.mul_(2)
        assert sanitizer.errors == []
        assert destination.tolist() == [2.0] * 64


@pytest.mark.usefixtures("two_devices")
def test_a_storage_moved_between_devices_is_a_checked_copy() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        x = torch.ones(64, device="cuda:0")
        moved = x.untyped_storage().cuda(1)
        y = torch.tensor([], device="cuda:1").set_(moved).view(torch.float32)
        y.add_(1)  # device 1's current stream waits for the copy
        assert sanitizer.errors == []
        side = torch.cuda.Stream(device=0)
        side.wait_stream(torch.cuda.default_stream(0))
        with torch.cuda.stream(side):
            x.mul_(2)
        x.untyped_storage().cuda(1)  # read on device 0's default stream: unordered after `side`
        assert _kinds(sanitizer) == ["read-after-write"]


# -- pytest --csan-devices --------------------------------------------------------------------

MULTI_GPU_SUITE = """
import subprocess
import sys

import pytest
import torch

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@two_gpus
def test_work_on_the_second_gpu():
    x = torch.ones(8, device="cuda:1")
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.mul_(2)
        torch.cuda.current_stream().wait_stream(side)
    assert x.sum().item() == 16


@two_gpus
def test_race_on_the_second_gpu():
    x = torch.ones(8, device="cuda:1")
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):
        x.mul_(2)


def test_a_child_process_has_the_same_devices():
    code = "import torch; print(torch.cuda.device_count())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(torch.cuda.device_count())
"""


@pytest.mark.parametrize("where", ["flag", "ini"])
def test_pytest_runs_multi_gpu_tests_on_csan_devices(tmp_path, where):
    (tmp_path / "test_multi_gpu.py").write_text(MULTI_GPU_SUITE)
    options = ["--csan", "--csan-device", "emulated"]
    if where == "flag":
        options += ["--csan-devices", "2"]
    else:
        (tmp_path / "pytest.ini").write_text("[pytest]\ncsan_devices = 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", *options, "test_multi_gpu.py"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={name: value for name, value in os.environ.items() if name != DEVICES_VARIABLE},
    )
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-2000:]
    assert "1 failed, 2 passed" in out and "skipped" not in out, out[-3000:]
    assert "FAILED test_multi_gpu.py::test_race_on_the_second_gpu" in out


def test_pytest_refuses_a_bad_device_count(tmp_path):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--csan", "--csan-device", "emulated"]
        + ["--csan-devices", "0", "test_nothing.py"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 4
    assert "--csan-devices: CSAN_LINT_DEVICES: expected a number of devices from 1 to 64, got '0'" in done.stderr


@pytest.mark.usefixtures("two_devices")
def test_backward_on_cuda_1_runs_on_its_forward_streams_and_restores_each_devices_stream() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        w = torch.randn(8, 8, device="cuda:1", requires_grad=True)
        x = torch.randn(4, 8, device="cuda:1")
        side = torch.cuda.Stream(device=1)
        side.wait_stream(torch.cuda.current_stream(1))
        with torch.cuda.stream(side):
            y = (x @ w).relu().sum()
        torch.cuda.current_stream(1).wait_stream(side)
        y.backward()  # from device 0: the root gradient is made on device 1's current stream
        assert torch.cuda.current_device() == 0
        assert torch.cuda.current_stream(1) == torch.cuda.default_stream(1)
        assert w.grad is not None and w.grad.get_device() == 1
        w.grad.sum()  # device 1's default stream was made to wait for the pass's streams
        assert sanitizer.errors == []


@pytest.mark.usefixtures("two_devices")
def test_a_leaf_on_cuda_1_accumulates_its_gradient_on_device_1() -> None:
    with Sanitizer(device="emulated") as sanitizer:
        w = torch.ones(8, device="cuda:1", requires_grad=True)
        with torch.cuda.device(1):
            (w * 2).sum().backward()
            (w * 3).sum().backward()  # accumulated into the same gradient
            assert torch.cuda.current_device() == 1
        assert w.grad is not None and w.grad.get_device() == 1 and w.grad.tolist() == [5.0] * 8
        w.grad.add_(1)  # device 1's current stream is ordered after the passes
        assert sanitizer.errors == []
        side = torch.cuda.Stream(device=1)
        with torch.cuda.stream(side):
            w.grad.mul_(2)  # a side stream the passes did not order
        assert _kinds(sanitizer) == ["write-after-write"]


@pytest.mark.usefixtures("two_devices")
def test_gradients_of_leaves_on_two_devices_land_on_each_leafs_device() -> None:
    # The backward of a copy between devices moves the gradient back to the source's device
    # (autograd's `grad.to(source.options())`), with the copy's ordering on both devices.
    with Sanitizer(device="emulated") as sanitizer:
        w0 = torch.ones(8, device="cuda:0", requires_grad=True)
        w1 = torch.ones(8, device="cuda:1", requires_grad=True)
        for _ in range(2):
            ((w0 * 2).to("cuda:1") * w1).sum().backward()
        assert w0.grad is not None and w1.grad is not None
        assert (w0.grad.get_device(), w1.grad.get_device()) == (0, 1)
        assert w0.grad.tolist() == [4.0] * 8 and w1.grad.tolist() == [4.0] * 8
        held = torch.cuda.memory_allocated(0)
        w0.grad = None
        assert torch.cuda.memory_allocated(0) < held  # the gradient was device 0's memory
        source = torch.ones(8, device="cuda:0", requires_grad=True)
        destination = torch.zeros(8, device="cuda:1")
        destination.copy_(source * 2)
        (destination * 3).sum().backward()
        assert source.grad is not None and source.grad.get_device() == 0 and source.grad.tolist() == [6.0] * 8
        source.grad.add_(1), w1.grad.add_(1)
        assert sanitizer.errors == []
