"""Runtime benchmark: our happens-before engine next to CSAN's `EventHandler`
(torch.cuda._sanitizer), fed the same synthetic event traces.

Each engine gets its natural stack capture: ours `capture_stack()` once per op, shared by the
allocation the op makes and its launch (as SanitizerMode does); CSAN the
`traceback.StackSummary.extract` it runs inside both `_handle_kernel_launch` and
`_handle_memory_allocation`. Launch arguments are built before the clock starts, in the form
each engine takes (our `Access` tuples; CSAN's pointer sets and alias dicts), so the engines are
timed, not the translation from torch. Traces are race-free: CSAN's cost on errors is not the
point. Targets are printed next to the numbers, never asserted.

    python benchmarks/runtime_bench.py [--launches N] [--depth D] [--memory-launches N]

Each section is a function returning table rows; `main` prints them (more sections can join
`SECTIONS`).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from csan_lint.runtime.events import Access
from csan_lint.runtime.stacks import capture_stack
from csan_lint.runtime.tracker import Tracker

THROUGHPUT_TARGET = 10.0
"""Our launches/s over CSAN's, on the same race-free trace."""

SIZE = 4096
MAIN, SIDE = 0, 7

Row = tuple[str, str, str, str]
"""(measure, ours, CSAN, ratio or note)."""


def _csan() -> Any:
    from torch.cuda import _sanitizer

    return _sanitizer


# -- traces ------------------------------------------------------------------------------------------


def churn_trace(launches: int, weights: int = 4, update_every: int = 0) -> list[tuple[Any, ...]]:
    """A training-loop-like, race-free trace: a few long-lived weights read by every launch,
    activations allocated, used and freed, and every 4th step a side stream that waits on the
    main stream, reads the activation, and is joined back before the activation is freed.
    With `update_every`, an optimizer step rewrites the weights that often; without, they are
    only read (CSAN keeps every read since the last write: its lists grow)."""
    ops: list[tuple[Any, ...]] = [("event_created", 1), ("event_created", 2)]
    weight_ptrs = [0x10_0000 + SIZE * i for i in range(weights)]
    for ptr in weight_ptrs:
        ops.append(("allocated", ptr, SIZE, MAIN))
    ptr_base = 0x100_0000
    live: list[int] = []
    step = 0
    done = 0
    while done < launches:
        activation = ptr_base + SIZE * (step % 64)
        ops.append(("allocated", activation, SIZE, MAIN))
        weight = weight_ptrs[step % weights]
        source = live[-1] if live else weight
        ops.append(("kernel_launched", MAIN, [weight, source], [activation]))
        done += 1
        if step % 4 == 0:
            ops += [("event_recorded", 1, MAIN), ("event_waited", 1, SIDE)]
            ops.append(("kernel_launched", SIDE, [activation, weight], []))
            ops += [("event_recorded", 2, SIDE), ("event_waited", 2, MAIN)]
            done += 1
        if update_every and step % update_every == update_every - 1:
            ops.append(("kernel_launched", MAIN, [], list(weight_ptrs)))
            done += 1
        live.append(activation)
        if len(live) > 8:
            ops.append(("freed", live.pop(0)))
        step += 1
    return ops


def _ours_ops(trace: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The trace with launch arguments prebuilt as our Access tuples."""
    out = []
    for op in trace:
        if op[0] == "kernel_launched":
            _, stream, reads, writes = op
            accesses = [Access(p, SIZE, False, "self") for p in reads] + [
                Access(p, SIZE, True, "out", True) for p in writes
            ]
            out.append(("kernel_launched", stream, "aten::op", accesses))
        else:
            out.append(op)
    return out


def _csan_ops(trace: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The trace with launch arguments prebuilt as CSAN takes them (sets, alias dict)."""
    out = []
    for op in trace:
        if op[0] == "kernel_launched":
            _, stream, reads, writes = op
            read_only = set(reads) - set(writes)
            aliases = {p: ["self"] for p in reads}
            aliases.update({p: ["out"] for p in writes})
            out.append(("kernel_launched", stream, read_only, set(writes), set(writes), aliases))
        else:
            out.append(op)
    return out


def feed_ours(ops: list[tuple[Any, ...]], tracker: Tracker, stop: frozenset[int] = frozenset()) -> None:
    """As the torch integration feeds it: an allocation is made by the op launched next (the
    activation it writes), and both report the one stack walked for that op
    (SanitizerMode.stack_of_running_op)."""
    op_stack = None
    for op in ops:
        name = op[0]
        if name == "kernel_launched":
            tracker.kernel_launched(op[1], op[2], op[3], op_stack or capture_stack(stop=stop))
            op_stack = None
        elif name == "allocated":
            op_stack = capture_stack(stop=stop)
            tracker.allocated(op[1], op[2], op[3], op_stack)
        elif name == "freed":
            tracker.freed(op[1])
        elif name == "event_recorded":
            tracker.event_recorded(op[1], op[2])
        elif name == "event_waited":
            tracker.event_waited(op[1], op[2])
        elif name == "event_created":
            tracker.event_created(op[1])


def feed_csan(ops: list[tuple[Any, ...]], handler: Any) -> list[Any]:
    errors: list[Any] = []
    for op in ops:
        name = op[0]
        if name == "kernel_launched":
            errors += handler._handle_kernel_launch(op[1], op[2], op[3], op[4], "aten::op", op[5])
        elif name == "allocated":
            handler._handle_memory_allocation(op[1])
        elif name == "freed":
            handler._handle_memory_deallocation(op[1])
        elif name == "event_recorded":
            handler._handle_event_record(op[1], op[2])
        elif name == "event_waited":
            handler._handle_event_wait(op[1], op[2])
        elif name == "event_created":
            handler._handle_event_creation(op[1])
    return errors


def at_depth(depth: int, fn: Callable[[], Any]) -> Any:
    """Run fn under `depth` extra frames: stack capture cost grows with the user's stack."""
    if depth <= 0:
        return fn()
    return at_depth(depth - 1, fn)


USER_FRAMES = 8
"""Of the extra frames, how many are the user's (test and model code); the rest stand for the
test runner's, which the pytest integration cuts with `capture_stack(stop=...)`."""


def _runner_call(fn: Callable[[], Any]) -> Any:
    """Stands for pytest's call into a test function: the integration's stop frame."""
    return fn()


RUNNER_STOP = frozenset({id(_runner_call.__code__)})


def under_runner(depth: int, fn: Callable[[], Any]) -> Any:
    """`depth` extra frames: runner frames, the runner's call into the test, user frames."""
    return at_depth(depth - USER_FRAMES, lambda: _runner_call(lambda: at_depth(USER_FRAMES, fn)))


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _launch_count(ops: list[tuple[Any, ...]]) -> int:
    return sum(op[0] == "kernel_launched" for op in ops)


# -- sections ------------------------------------------------------------------------------------------


def bench_throughput(launches: int, depth: int, update_every: int, cut: bool = False) -> Iterator[Row]:
    """Launches per second on the same race-free churn trace (best of 3). With `cut`, our
    stacks stop at the runner's call into the test, as under `pytest --csan`; CSAN's never do."""
    trace = churn_trace(launches, update_every=update_every)
    ours_ops, csan_ops = _ours_ops(trace), _csan_ops(trace)
    n = _launch_count(trace)
    csan = _csan()
    ours_s, csan_s = [], []
    for _ in range(3):
        tracker = Tracker()
        stop = RUNNER_STOP if cut else frozenset()
        # Defaults bind this round's objects (B023); lambdas, not partials, keep the frame counts.
        ours_s.append(_timed(lambda t=tracker, s=stop: under_runner(depth, lambda: feed_ours(ours_ops, t, s))))
        assert tracker.errors == [], "the churn trace must be race-free for our engine"
        handler = csan.EventHandler()
        found: list[Any] = []
        csan_s.append(_timed(lambda f=found, h=handler: f.extend(under_runner(depth, lambda: feed_csan(csan_ops, h)))))
        assert found == [], "the churn trace must be race-free for CSAN"
    ours_rate, csan_rate = n / min(ours_s), n / min(csan_s)
    weights = f"weights updated every {update_every} steps" if update_every else "read-only weights"
    frames = f"+{depth} frames" + (f", ours cut to {USER_FRAMES}" if cut else "")
    yield (
        f"launches/s ({n} launches, {weights}, {frames})",
        f"{ours_rate:,.0f}",
        f"{csan_rate:,.0f}",
        f"{ours_rate / csan_rate:.1f}x (target >= {THROUGHPUT_TARGET:.0f}x)",
    )


def _write_after_reads_ours(reads: int, repeats: int) -> float:
    samples = []
    write = [Access(0x1000, SIZE, True, "out")]
    read = [Access(0x1000, SIZE, False, "self")]
    for _ in range(repeats):
        tracker = Tracker()
        tracker.kernel_launched(MAIN, "aten::op", write, capture_stack())
        for i in range(reads):
            stream = SIDE + i % 2
            tracker.event_recorded(1, MAIN)
            tracker.event_waited(1, stream)
            tracker.kernel_launched(stream, "aten::op", read, capture_stack())
        tracker.event_recorded(2, SIDE)
        tracker.event_waited(2, MAIN)
        tracker.event_recorded(3, SIDE + 1)
        tracker.event_waited(3, MAIN)
        start = time.perf_counter()
        tracker.kernel_launched(MAIN, "aten::op", write, capture_stack())
        samples.append(time.perf_counter() - start)
        assert tracker.errors == []
    return statistics.median(samples)


def _write_after_reads_csan(reads: int, repeats: int) -> float:
    csan = _csan()
    samples = []
    ptr = 0x1000
    for _ in range(repeats):
        handler = csan.EventHandler()
        handler._handle_kernel_launch(MAIN, set(), {ptr}, set(), "aten::op", {ptr: ["out"]})
        for i in range(reads):
            stream = SIDE + i % 2
            handler._handle_event_record(1, MAIN)
            handler._handle_event_wait(1, stream)
            handler._handle_kernel_launch(stream, {ptr}, set(), set(), "aten::op", {ptr: ["self"]})
        handler._handle_event_record(2, SIDE)
        handler._handle_event_wait(2, MAIN)
        handler._handle_event_record(3, SIDE + 1)
        handler._handle_event_wait(3, MAIN)
        start = time.perf_counter()
        errors = handler._handle_kernel_launch(MAIN, set(), {ptr}, set(), "aten::op", {ptr: ["out"]})
        samples.append(time.perf_counter() - start)
        assert errors == []
    return statistics.median(samples)


def bench_write_after_reads(depth: int) -> Iterator[Row]:
    """Cost of one write after N reads (on two side streams) since the last write: CSAN checks
    its list of every read, we keep the last read per stream."""
    for reads in (1, 10, 100, 1000):
        repeats = 50 if reads < 1000 else 15
        ours = at_depth(depth, lambda n=reads, r=repeats: _write_after_reads_ours(n, r))  # defaults: B023
        csan = at_depth(depth, lambda n=reads, r=repeats: _write_after_reads_csan(n, r))
        yield (f"one write after {reads} reads (us)", f"{ours * 1e6:.1f}", f"{csan * 1e6:.1f}", f"{csan / ours:.1f}x")


def _peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    gc.collect()
    tracemalloc.start()
    try:
        kept = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, kept


def bench_memory(launches: int, depth: int) -> Iterator[Row]:
    """Peak traced memory of the engine over a long churn (trace built before tracing starts)."""
    trace = churn_trace(launches)
    ours_ops, csan_ops = _ours_ops(trace), _csan_ops(trace)
    csan = _csan()

    def ours() -> Tracker:
        tracker = Tracker()
        at_depth(depth, lambda: feed_ours(ours_ops, tracker))
        return tracker

    def theirs() -> Any:
        handler = csan.EventHandler()
        at_depth(depth, lambda: feed_csan(csan_ops, handler))
        return handler

    ours_peak, _ = _peak(ours)
    csan_peak, _ = _peak(theirs)
    n = _launch_count(trace)
    yield (
        f"peak memory over {n} launches (MiB)",
        f"{ours_peak / 2**20:.2f}",
        f"{csan_peak / 2**20:.2f}",
        f"{csan_peak / max(ours_peak, 1):.0f}x less",
    )


def bench_dispatch_overhead(depth: int) -> Iterator[Row]:
    """The torch integration's dispatch-mode cost per op (benchmarks/dispatch_bench.py)."""
    from dispatch_bench import bench_dispatch

    return bench_dispatch(30_000, depth)


SECTIONS: list[Callable[[argparse.Namespace], Iterator[Row]]] = [
    lambda a: bench_throughput(a.launches, a.depth, update_every=16),
    lambda a: bench_throughput(a.launches, a.depth, update_every=16, cut=True),
    lambda a: bench_throughput(a.launches, a.depth, update_every=0),
    lambda a: bench_write_after_reads(a.depth),
    lambda a: bench_memory(a.memory_launches, a.depth),
    lambda a: bench_dispatch_overhead(a.depth),
]


def print_table(rows: list[Row]) -> None:
    header: Row = ("measure", "csan-lint", "CSAN", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for i, row in enumerate([header, *rows]):
        print(
            "  ".join(
                cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=50_000, help="launches for the throughput run")
    parser.add_argument("--depth", type=int, default=30, help="extra stack frames under each call")
    parser.add_argument("--memory-launches", type=int, default=100_000, help="launches for the memory run")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    for section in SECTIONS:
        rows.extend(section(args))
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
