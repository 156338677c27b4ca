"""The emulated device's caching allocator behaves as CUDA's native one: addresses come back to
their stream, `record_stream` delays reuse until the recorded stream's work is known done, sizes
and statistics are rounded and counted as CUDA counts them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.usefixtures("device")
MiB = 2**20


def test_a_freed_block_comes_back_to_the_next_request_of_its_size_on_its_stream():
    first = torch.empty(1000, device="cuda")
    address = first.data_ptr()
    del first
    again = torch.empty(1000, device="cuda")
    assert again.data_ptr() == address


def test_a_freed_block_does_not_go_to_another_stream():
    side = torch.cuda.Stream()
    first = torch.empty(1000, device="cuda")
    address = first.data_ptr()
    del first
    with torch.cuda.stream(side):
        other = torch.empty(1000, device="cuda")
    assert other.data_ptr() != address
    del other
    again = torch.empty(1000, device="cuda")
    assert again.data_ptr() == address


def test_small_requests_split_one_segment_in_512_byte_steps():
    a = torch.empty(10, dtype=torch.uint8, device="cuda")
    b = torch.empty(600, dtype=torch.uint8, device="cuda")
    c = torch.empty(1, dtype=torch.uint8, device="cuda")
    assert b.data_ptr() - a.data_ptr() == 512 and c.data_ptr() - b.data_ptr() == 1024
    assert torch.cuda.memory_allocated() == 2048
    assert torch.cuda.memory_reserved() == 2 * MiB  # one small-pool segment


def test_freed_neighbours_merge_into_one_block():
    a = torch.empty(512, dtype=torch.uint8, device="cuda")
    b = torch.empty(512, dtype=torch.uint8, device="cuda")
    start = a.data_ptr()
    del a, b
    merged = torch.empty(1024, dtype=torch.uint8, device="cuda")
    assert merged.data_ptr() == start


def test_large_requests_get_segments_of_cudas_sizes():
    held = torch.empty(11 * MiB, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_reserved() == 12 * MiB  # rounded up to 2 MiB
    torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")  # freed at once, kept in the cache
    assert torch.cuda.memory_reserved() == 12 * MiB + 20 * MiB
    # the 1 MiB rest of its segment is too small to split off in the large pool: the block has it
    assert torch.cuda.memory_allocated() == 12 * MiB
    reused = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")  # from the cached 20 MiB
    assert torch.cuda.memory_reserved() == 32 * MiB
    del reused
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == 12 * MiB
    del held


def test_record_stream_delays_reuse_until_the_recorded_streams_work_is_done():
    # PyTorch's TestCuda.test_record_stream, shortened
    side = torch.cuda.Stream()
    result = torch.empty(4, device="cuda")
    with torch.cuda.stream(side):
        tmp = torch.ones(4, device="cuda")
        address = tmp.data_ptr()
    torch.cuda.current_stream().wait_stream(side)
    tmp.record_stream(torch.cuda.current_stream())
    result.copy_(tmp)
    del tmp
    with torch.cuda.stream(side):
        too_soon = torch.empty(4, device="cuda")
    assert too_soon.data_ptr() != address, "reused while the default stream may still read it"
    torch.cuda.current_stream().synchronize()
    with torch.cuda.stream(side):
        later = torch.empty(4, device="cuda")
    assert later.data_ptr() == address
    assert result.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_memory_statistics_follow_the_allocator():
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    x = torch.randn(256, device="cuda")  # 1 KiB
    stats = torch.cuda.memory_stats()
    assert stats["active_bytes.all.current"] == 1024 and stats["requested_bytes.all.current"] == 1024
    assert stats["allocation.small_pool.current"] == 1 and stats["segment.all.current"] == 1
    y = torch.randn(100, device="cuda")  # 400 bytes, rounded to 512
    assert torch.cuda.memory_allocated() == 1536
    del x, y
    stats = torch.cuda.memory_stats()
    assert stats["active_bytes.all.current"] == 0 and stats["active_bytes.all.freed"] == 1536
    assert torch.cuda.max_memory_allocated() == 1536 and torch.cuda.max_memory_reserved() == 2 * MiB
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == 0 and torch.cuda.max_memory_reserved() == 0
    torch.cuda.reset_accumulated_memory_stats()
    assert torch.cuda.memory_stats()["active_bytes.all.freed"] == 0


def test_record_stream_blocks_are_given_back_when_memory_runs_out(monkeypatch):
    # CUDA's allocator waits for the events of record_stream'ed blocks before it gives up.
    from csan_lint.runtime.emulation import device

    monkeypatch.setattr(device.memory.allocator, "capacity", 64 * MiB)
    side = torch.cuda.Stream()
    for _ in range(10):
        x = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
        x.record_stream(side)
        with torch.cuda.stream(side):
            x.add_(1)
        del x
    stats = torch.cuda.memory_stats()
    assert stats["num_alloc_retries"] > 0 and stats["num_ooms"] == 0
    assert torch.cuda.memory_reserved() <= 64 * MiB


def test_reuse_is_seen_by_the_allocation_callbacks(trace):
    x = torch.empty(16, device="cuda")
    address = x.data_ptr()
    del x
    y = torch.empty(16, device="cuda")
    assert trace.of("allocated") == [(address,), (address,)]
    assert trace.of("freed") == [(address,)]
    del y


def test_an_out_kernel_that_resizes_a_device_output_gets_new_memory():
    x = torch.arange(6.0, device="cuda")
    out = torch.empty(2, device="cuda")
    torch.cat([x, x], out=out)
    assert out.device == torch.device("cuda", 0) and out.tolist() == [0.0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
    grown = torch.zeros(2, device="cuda")
    grown.resize_(600)
    assert grown.device == torch.device("cuda", 0) and grown[:2].tolist() == [0.0, 0.0]


def test_device_tensors_outlive_the_emulation():
    from csan_lint.runtime import emulation

    x = torch.arange(4.0, device="cuda")
    emulation.deactivate()
    try:
        assert (x + 1).tolist() == [1.0, 2.0, 3.0, 4.0]
    finally:
        emulation.activate()


def test_the_device_memory_size_is_configurable(tmp_path):
    script = (
        "import torch\nfrom csan_lint.runtime import emulation\nemulation.activate()\n"
        "print(torch.cuda.get_device_properties(0).total_memory, torch.cuda.mem_get_info()[1])\n"
        "try:\n    torch.empty(300 * 2**20, dtype=torch.uint8, device='cuda')\n"
        "except torch.OutOfMemoryError as error:\n    print(str(error).split('.')[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CSAN_LINT_DEVICE_MEMORY": "256MiB"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == [f"{256 * MiB} {256 * MiB}", "CUDA out of memory"]


SUITE = """
import pytest
import torch


def test_the_device_has_the_memory_given():
    assert torch.cuda.get_device_properties(0).total_memory == 256 * 2**20
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        torch.empty(300 * 2**20, dtype=torch.uint8, device="cuda")
"""


@pytest.mark.parametrize(("size", "exit_code"), [("256MiB", 0), ("lots", 4)])
def test_pytest_sets_the_device_memory(tmp_path, size, exit_code):
    (tmp_path / "test_memory.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--csan-emulate"]
        + ["--csan-device-memory", size, str(tmp_path / "test_memory.py")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == exit_code, done.stdout[-2000:] + done.stderr[-2000:]
    if exit_code:
        assert "--csan-device-memory: not a memory size: 'lots'" in done.stderr


def _capture(graph, side, pool=None):
    with torch.cuda.stream(side):
        graph.capture_begin(*(() if pool is None else (pool,)))
        out = torch.ones(10, device="cuda") * 2
        graph.capture_end()
    return out


def test_a_graph_allocates_from_its_private_pool_kept_while_it_lives():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    before = torch.cuda.memory_reserved()
    graph = torch.cuda.CUDAGraph()
    out = _capture(graph, side)
    assert torch.cuda.memory_reserved() == before + 2 * MiB  # a segment of its own
    with torch.cuda.stream(side):
        eager = torch.empty(10, device="cuda")
    assert torch.cuda.memory_reserved() == before + 4 * MiB  # never from the graph's pool
    del out, eager
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == before + 2 * MiB  # the live graph keeps its pool
    del graph
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == before


def test_graphs_sharing_a_pool_share_its_segments():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    before = torch.cuda.memory_reserved()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    outs = [_capture(first, side), _capture(second, side, first.pool())]
    assert torch.cuda.memory_reserved() == before + 2 * MiB
    del outs


def _round_trips(ordered: bool) -> tuple[int, list[str]]:
    """A loop whose blocks are used on two streams and reused: (distinct addresses, races).
    `ordered`: each stream waits for the other's use before its pool hands the block out again,
    and the uses are recorded; else neither."""
    from csan_lint.runtime import emulation, sanitize

    emulation.deactivate()  # the sanitizer brings its own emulated device
    try:
        with sanitize(device="emulated") as sanitizer:
            side = torch.cuda.Stream()
            addresses = set()
            for step in range(12):
                x = torch.ones(1000, device="cuda")
                addresses.add(x.data_ptr())
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    y = x * 2
                if ordered:
                    torch.cuda.current_stream().wait_stream(side)
                (y + 1).sum()
                if ordered:
                    x.record_stream(side)
                    y.record_stream(torch.cuda.current_stream())
                del x, y
                if step % 4 == 3:
                    torch.cuda.synchronize()
        return len(addresses), [error.kind for error in sanitizer.errors]
    finally:
        emulation.activate()


def test_the_sanitizer_sees_reused_blocks_as_new_allocations():
    addresses, races = _round_trips(ordered=True)
    assert addresses < 12  # blocks came back after the syncs
    assert races == []
    _, races = _round_trips(ordered=False)
    assert "free-in-use" in races
