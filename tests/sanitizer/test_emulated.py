"""The sanitizer end to end on the emulated device: user code written for a GPU, run on CPU,
gives the reports a GPU run would give. One test per error kind, each with its fixed twin."""

from __future__ import annotations

import sys
import threading
import weakref

import pytest
import torch

from csan_lint.runtime import kinds, sanitize
from csan_lint.runtime.report import render_text
from csan_lint.runtime.stacks import innermost_user_frame


def here() -> int:
    """The caller's line number, to name the user lines a report must point at. Called on the
    line of the statement it names (`x.sum(); line = here()`, kept whole by `# fmt: skip`)."""
    return sys._getframe(1).f_lineno


def only(errors, kind=None):
    assert len(errors) == 1, "\n\n".join(render_text(e) for e in errors)
    if kind is not None:
        assert errors[0].kind == kind, render_text(errors[0])
    return errors[0]


def races(errors):
    return [e for e in errors if e.severity == "error"]


def line(record) -> int:
    frame = innermost_user_frame(record.stack)
    assert frame is not None and frame.filename == __file__
    return frame.lineno


@pytest.fixture
def emulated():
    with sanitize(device="emulated") as sanitizer:
        yield sanitizer


# -- the example from CSAN's documentation ---------------------------------------------------


def test_csan_docs_example_gives_one_report_naming_both_operators_and_lines(emulated):
    a = torch.rand(4, 2, device="cuda"); rand_line = here()  # noqa: E702  # fmt: skip
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.mul(a, 5, out=a); mul_line = here()  # noqa: E702  # fmt: skip
    report = only(emulated.errors, kinds.WRITE_AFTER_WRITE)
    assert "aten::mul" in report.current.operator
    assert "rand" in report.previous.operator or "uniform" in report.previous.operator
    assert line(report.current) == mul_line
    assert line(report.previous) == rand_line
    assert report.current.stream != 0 and report.previous.stream == 0


def test_csan_docs_example_fixed_is_clean(emulated):
    a = torch.rand(4, 2, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.mul(a, 5, out=a)
    assert emulated.errors == []


# -- read/write hazards ---------------------------------------------------------------------------


def test_read_after_write_on_another_stream(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
    x.sum(); read_line = here()  # noqa: E702  # fmt: skip
    report = only(emulated.errors, kinds.READ_AFTER_WRITE)
    assert line(report.current) == read_line and report.previous.stream == side.cuda_stream


def test_read_after_write_joined_is_clean(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
    torch.cuda.current_stream().wait_stream(side)
    x.sum()
    assert emulated.errors == []


def test_write_after_read(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.zero_()
    report = only(emulated.errors, kinds.WRITE_AFTER_READ)
    assert "aten::mul" in report.previous.operator and "aten::zero_" in report.current.operator
    del y


def test_write_after_write(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.fill_(1)
    x.fill_(2)
    only(emulated.errors, kinds.WRITE_AFTER_WRITE)


def test_view_at_an_offset_races_with_its_base(emulated):
    x = torch.zeros(16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x[8:].add_(1)  # data_ptr differs from x's: CSAN's pointer check misses this
    x.sum()
    only(emulated.errors, kinds.READ_AFTER_WRITE)


def test_disjoint_slices_on_two_streams_are_clean(emulated):
    x = torch.zeros(16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x[8:].add_(1)
    x[:8].add_(2)
    assert emulated.errors == []


# -- metadata-only ops ------------------------------------------------------------------------------


def test_set_onto_another_storage_touches_no_bytes(emulated):
    """`set_` only re-points a tensor's metadata: on a side stream that never waited it is
    not a write of the storage it points at (fairscale's record_stream helper does this)."""
    x = torch.ones(4, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        alias = x.new_empty([0]).set_(x.untyped_storage())
    torch.cuda.synchronize()
    assert emulated.errors == []
    assert alias.data_ptr() == x.data_ptr()


def test_writes_through_a_set_tensor_are_writes_of_its_new_storage(emulated):
    x = torch.ones(4, device="cuda")
    alias = x.new_empty([0]).set_(x.untyped_storage())
    with torch.cuda.stream(torch.cuda.Stream()):
        alias.add_(1)
    assert "aten::add_" in only(emulated.errors, kinds.WRITE_AFTER_WRITE).current.operator
    torch.cuda.synchronize()


# -- the caching allocator -------------------------------------------------------------------------


def test_free_while_another_stream_uses_the_block_races_its_reuse(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2; use_line = here()  # noqa: E702  # fmt: skip
    del x; free_line = here()  # noqa: E702  # fmt: skip
    assert emulated.errors == []  # nothing reused the block yet
    z = torch.empty(8, device="cuda"); again_line = here()  # noqa: E702  # fmt: skip
    report = only(emulated.errors, kinds.FREE_IN_USE)
    assert (line(report.current), line(report.previous), line(report.reallocation)) == (
        free_line,
        use_line,
        again_line,
    )
    del y, z


def test_allocating_stream_waiting_for_the_user_before_it_allocates_again_is_clean(emulated):
    # transformers' offloaded cache: layers prefetched on a private stream, used on the default
    # stream, freed; the prefetch stream waits for the default stream before its next allocation.
    prefetch = torch.cuda.Stream()
    with torch.cuda.stream(prefetch):
        layer = torch.ones(8, device="cuda")
    torch.cuda.current_stream().wait_stream(prefetch)
    out = layer * 2
    del layer
    prefetch.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(prefetch):
        layer = torch.ones(8, device="cuda")
    assert emulated.errors == []
    with torch.cuda.stream(prefetch):  # the same without the wait
        victim = torch.ones(8, device="cuda")
    torch.cuda.current_stream().wait_stream(prefetch)
    out = victim * 2
    del victim
    with torch.cuda.stream(prefetch):
        layer = torch.ones(8, device="cuda")
    assert only(emulated.errors, kinds.FREE_IN_USE).allocation.stream == prefetch.cuda_stream
    del out, layer


def test_free_after_record_stream_is_clean(emulated):
    x = torch.ones(8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    del x
    z = torch.empty(8, device="cuda")
    assert emulated.errors == []
    del y, z


def test_block_belongs_to_the_stream_it_was_allocated_on(emulated):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.tensor([1.0, 2.0], device="cuda")  # no kernel: the allocation alone names `side`
    x.add_(1)
    del x
    kept = torch.empty(2, device="cuda")  # the default stream's pool: not the block's
    assert emulated.errors == []
    with torch.cuda.stream(side):
        torch.empty(2, device="cuda")
    report = only(emulated.errors, kinds.FREE_IN_USE)
    assert report.allocation.stream == side.cuda_stream
    del kept


# -- pinned memory and non-blocking copies -------------------------------------------------------


def test_host_reads_a_non_blocking_copy_before_sync(emulated):
    x = torch.arange(4.0, device="cuda")
    host = x.to("cpu", non_blocking=True)
    assert host.is_pinned()
    host[1].item(); read_line = here()  # noqa: E702  # fmt: skip
    report = only(races(emulated.errors), kinds.HOST_READ_PENDING)
    assert line(report.current) == read_line


def test_host_tolist_before_sync_races_and_after_sync_is_clean(emulated):
    x = torch.arange(4.0, device="cuda")
    early = x.to("cpu", non_blocking=True)
    early.tolist()
    assert [e.kind for e in emulated.errors] == [kinds.HOST_READ_PENDING]
    late = x.to("cpu", non_blocking=True)
    torch.cuda.synchronize()
    assert late.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len(emulated.errors) == 1


def test_a_query_that_answers_done_orders_the_host(emulated):
    x = torch.arange(4.0, device="cuda")
    by_stream = x.to("cpu", non_blocking=True)
    while not torch.cuda.current_stream().query():
        pass  # "not done" once after new work (the emulation's query policy)
    by_stream.tolist()
    done = torch.cuda.Event()
    by_event = x.to("cpu", non_blocking=True)
    done.record()
    while not done.query():
        pass
    by_event.tolist()
    assert emulated.errors == []


def test_host_overwrites_pinned_source_of_a_pending_upload(emulated):
    staging = torch.ones(4).pin_memory()
    device = staging.to("cuda", non_blocking=True)
    staging.fill_(3)
    only(races(emulated.errors), kinds.HOST_WRITE_PENDING)
    del device


def test_blocking_copy_to_host_orders_the_host(emulated):
    x = torch.arange(4.0, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.add_(1)
        values = x.cpu()  # blocking: syncs the host with `side`
    assert values.tolist() == [1.0, 2.0, 3.0, 4.0]
    torch.cuda.current_stream().wait_stream(side)
    x.sum()
    assert emulated.errors == []


# -- events ------------------------------------------------------------------------------------------


def test_event_record_then_wait_orders_the_streams(emulated):
    x = torch.ones(8, device="cuda")
    done = torch.cuda.Event()
    done.record()
    side = torch.cuda.Stream()
    side.wait_event(done)
    with torch.cuda.stream(side):
        x.mul_(2)
    assert emulated.errors == []


def test_waiting_on_an_unrecorded_event_orders_nothing(emulated):
    x = torch.ones(8, device="cuda")
    never = torch.cuda.Event()
    side = torch.cuda.Stream()
    side.wait_event(never)
    with torch.cuda.stream(side):
        x.mul_(2)
    found = sorted(e.kind for e in emulated.errors)
    assert found == sorted([kinds.WAIT_UNRECORDED_EVENT, kinds.WRITE_AFTER_WRITE])


# -- CUDA graphs --------------------------------------------------------------------------------------


def test_capture_on_the_default_stream(emulated):
    graph = torch.cuda.CUDAGraph()
    begin_line = here() + 2
    with pytest.raises(RuntimeError):
        graph.capture_begin()
    report = only(emulated.errors, kinds.CAPTURE_ON_DEFAULT_STREAM)
    assert line(report.current) == begin_line


def test_capture_with_an_unjoined_side_stream(emulated):
    x = torch.ones(8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    try:
        with torch.cuda.graph(graph):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x * 2
    except RuntimeError:
        pass  # CUDA refuses to end a capture with an unjoined fork
    assert kinds.UNJOINED_CAPTURE_FORK in [e.kind for e in emulated.errors]
    del y


def test_capture_forked_and_joined_is_clean(emulated):
    x = torch.ones(8, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.graph(graph):
        capture = torch.cuda.current_stream()
        side.wait_stream(capture)
        with torch.cuda.stream(side):
            y = x * 2
        capture.wait_stream(side)
    graph.replay()
    torch.cuda.synchronize()
    assert emulated.errors == []
    del y


def test_replay_reads_static_inputs_on_the_replay_stream(emulated):
    static = torch.ones(8, device="cuda")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = static * 2
    # Captured work did not run during capture: refilling the input on another stream after
    # the capture is fine, but the replay on the default stream reads it unordered.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        static.fill_(3)
    graph.replay(); replay_line = here()  # noqa: E702  # fmt: skip
    report = only(emulated.errors, kinds.READ_AFTER_WRITE)
    assert report.current.operator == "cuda_graph.replay" and line(report.current) == replay_line
    assert "aten::fill_" in report.previous.operator
    del result


# -- threads ------------------------------------------------------------------------------------------


def _on_own_stream(tensor: torch.Tensor, barrier: threading.Barrier) -> None:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.default_stream())
    barrier.wait()
    with torch.cuda.stream(stream):
        tensor.add_(1)


def _run_threads(*tensors: torch.Tensor) -> None:
    barrier = threading.Barrier(len(tensors))
    threads = [threading.Thread(target=_on_own_stream, args=(t, barrier)) for t in tensors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_two_threads_on_their_own_streams_writing_their_own_tensors_are_clean(emulated):
    a = torch.zeros(4, device="cuda")
    b = torch.zeros(4, device="cuda")
    _run_threads(a, b)
    assert emulated.errors == []


def test_two_threads_on_their_own_streams_writing_one_tensor_race(emulated):
    shared = torch.zeros(4, device="cuda")
    _run_threads(shared, shared)
    report = only(emulated.errors, kinds.WRITE_AFTER_WRITE)
    assert report.current.stream != report.previous.stream


class _Producer(threading.Thread):
    """A Thread subclass overriding run(): its work must be checked too."""

    def __init__(self, source: torch.Tensor) -> None:
        super().__init__()
        self.source = source
        self.result: torch.Tensor | None = None

    def run(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.default_stream())
        with torch.cuda.stream(stream):
            self.result = self.source * 2  # a fresh tensor written on the thread's stream


def test_fresh_result_of_a_thread_subclass_read_unsynced_races(emulated):
    producer = _Producer(torch.ones(4, device="cuda"))
    producer.start()
    producer.join()
    producer.result.sum()
    report = only(races(emulated.errors), kinds.READ_AFTER_WRITE)
    assert "aten::mul" in report.previous.operator


def test_a_training_step_on_one_stream_is_clean(emulated):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        batch = torch.randn(4, 8).pin_memory().to("cuda", non_blocking=True)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss.item()
    assert emulated.errors == []
    assert emulated.internal_errors == []


def test_prefetch_on_a_side_stream_without_wait_races(emulated):
    model = torch.nn.Linear(8, 2).cuda()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        batch = torch.randn(4, 8).pin_memory().to("cuda", non_blocking=True)
    model(batch).sum().item()
    report = only(races(emulated.errors), kinds.READ_AFTER_WRITE)
    assert report.previous.stream == side.cuda_stream


class _Local:
    """An object only a function's local holds (weakly referenceable, unlike a tensor's data)."""


def test_captured_stacks_keep_no_frame_alive(emulated):
    """Stacks are walked as code objects and offsets: once the function that ran the ops returns,
    its locals are freed, though the engine still holds its blocks and their stacks."""

    def run_ops() -> tuple[weakref.ref[_Local], torch.Tensor, torch.Tensor]:
        local = _Local()
        x = torch.ones(4, device="cuda")  # an allocation: the allocator's callback walks the stack
        x.add_(1)  # a launch that allocates nothing: the mode walks it
        y = torch.add(x, x)  # an allocation and its launch share one walk
        return weakref.ref(local), x, y

    freed, x, y = run_ops()
    held = emulated.tracker._allocations[y.untyped_storage().data_ptr()]
    assert innermost_user_frame(held.stack).function == "run_ops"
    assert freed() is None
