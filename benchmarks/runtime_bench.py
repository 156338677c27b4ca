"""Runtime benchmark: our happens-before engine next to CSAN's `EventHandler`
(torch.cuda._sanitizer), fed the same synthetic event traces.

Each engine gets its natural stack capture, walking the whole stack (neither is cut at a test
runner's frame): ours `capture_stack()` once per op, shared by the allocation the op makes and
its launch (as SanitizerMode does); CSAN the `traceback.StackSummary.extract` it runs inside
both `_handle_kernel_launch` and `_handle_memory_allocation`. Each row names how many frames a
walk crosses (a pytest test's body runs about 33 deep). The stubbed rows give both engines one
constant stack, so the happens-before cores are compared alone. Launch arguments are built
before the clock starts, in the form each engine takes (our `Access` tuples; CSAN's pointer
sets and alias dicts), and each engine's methods are bound before its loop, so the engines are
timed, not the translation from torch nor the harness's dispatch. Traces are
race-free: CSAN's cost on errors is not the point. Targets are printed next to the numbers,
never asserted.

    python benchmarks/runtime_bench.py [--launches N] [--depth D] [--memory-launches N]

Each section is a function returning table rows; `main` prints them (more sections can join
`SECTIONS`) and the README row they stand for.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
import traceback
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_table import Row, print_table, readme_row

from csan_lint.runtime.events import Access
from csan_lint.runtime.stacks import Stack, capture_stack
from csan_lint.runtime.tracker import Tracker

LIVE_TARGET = 20.0
"""Our launches/s over CSAN's on the same race-free trace, stacks walked live in both."""
STUBBED_TARGET = 5.0
"""The same with one constant stack in both: the happens-before cores alone."""

README_MEASURES = (
    "engine launches/s next to CSAN's `EventHandler` on the same trace (stacks live in both, then stubbed in"
    " both); write cost as reads grow; memory on read-only and updated weights; dispatch overhead"
)
README_FIGURES = (
    "live stacks ({frames} frames) {live_updated}x updated weights, {live_read_only}x read-only (target 20x);"
    " stubbed {stubbed}x (target 5x); write after 1000 reads {write_ours} µs vs {write_csan} µs;"
    " {memory_read_only_ours} MiB vs {memory_read_only_csan} MiB read-only, {memory_updated_ours} MiB vs"
    " {memory_updated_csan} MiB updated; mode vs do-nothing mode {dispatch}x"
)
"""The README row this script prints; tests/docs checks README's row has this shape."""

SIZE = 4096
MAIN, SIDE = 0, 7
STUB_STACK: Stack = capture_stack()
"""The one stack the stubbed rows hand our engine (CSAN's gets an empty summary)."""


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


NO_STACK, OWN_STACK, OP_STACK = range(3)
"""The stack a call of ours takes: none; a walk of its own (an allocation: the walk of the op
making it); its op's (a launch: the walk of the allocation the op made, else a walk of its own)."""

_CSAN_METHODS = {
    "allocated": "_handle_memory_allocation",
    "freed": "_handle_memory_deallocation",
    "event_recorded": "_handle_event_record",
    "event_waited": "_handle_event_wait",
    "event_created": "_handle_event_creation",
    "kernel_launched": "_handle_kernel_launch",
}


def _ours_ops(trace: list[tuple[Any, ...]]) -> list[tuple[str, tuple[Any, ...], int]]:
    """The trace as calls of our engine (method, arguments, stack role), launch arguments
    prebuilt as our Access tuples."""
    out = []
    for op in trace:
        name = op[0]
        if name == "kernel_launched":
            _, stream, reads, writes = op
            accesses = [Access(p, SIZE, False, "self") for p in reads] + [
                Access(p, SIZE, True, "out", True) for p in writes
            ]
            out.append((name, (stream, "aten::op", accesses), OP_STACK))
        else:
            out.append((name, op[1:], OWN_STACK if name == "allocated" else NO_STACK))
    return out


def _csan_ops(trace: list[tuple[Any, ...]]) -> list[tuple[str, tuple[Any, ...]]]:
    """The trace as calls of CSAN's handler, launch arguments prebuilt as it takes them (sets,
    alias dict); an allocation is its pointer only."""
    out = []
    for op in trace:
        name = op[0]
        if name == "kernel_launched":
            _, stream, reads, writes = op
            read_only = set(reads) - set(writes)
            aliases = {p: ["self"] for p in reads}
            aliases.update({p: ["out"] for p in writes})
            out.append((_CSAN_METHODS[name], (stream, read_only, set(writes), set(writes), "aten::op", aliases)))
        else:
            out.append((_CSAN_METHODS[name], op[1:2] if name == "allocated" else op[1:]))
    return out


def bind(ops: list[tuple[Any, ...]], engine: Any) -> list[tuple[Any, ...]]:
    """The calls with their engine's methods bound, made before a clock starts."""
    return [(getattr(engine, name), *rest) for name, *rest in ops]


def feed_ours(calls: list[tuple[Any, ...]], capture: Callable[[], Stack] = capture_stack) -> None:
    """As the torch integration feeds it: an allocation is made by the op launched next (the
    activation it writes), and both report the one stack walked for that op
    (SanitizerMode.stack_of_running_op)."""
    op_stack = None
    for method, args, role in calls:
        if role == NO_STACK:
            method(*args)
        elif role == OWN_STACK:
            op_stack = capture()
            method(*args, op_stack)
        else:
            method(*args, op_stack or capture())
            op_stack = None


def feed_csan(calls: list[tuple[Any, ...]]) -> list[Any]:
    """CSAN's handler on the same trace; its launches answer the errors they found."""
    errors: list[Any] = []
    for method, args in calls:
        found = method(*args)
        if found:
            errors += found
    return errors


def at_depth(depth: int, fn: Callable[[], Any]) -> Any:
    """Run fn under `depth` extra frames: stack capture cost grows with the user's stack."""
    if depth <= 0:
        return fn()
    return at_depth(depth - 1, fn)


def frames_walked(depth: int) -> int:
    """How many frames a walk from inside `feed_ours` run at `depth` crosses."""
    return at_depth(depth, lambda: (lambda: len(capture_stack()) // 2)())  # the lambda stands for feed_ours


@contextlib.contextmanager
def csan_stacks_stubbed() -> Iterator[None]:
    """CSAN's stack walk (`StackSummary.extract`) answers an empty summary while active."""
    extract = traceback.StackSummary.__dict__["extract"]
    traceback.StackSummary.extract = classmethod(lambda cls, *args, **kwargs: cls())  # type: ignore[method-assign]
    try:
        yield
    finally:
        traceback.StackSummary.extract = extract  # type: ignore[method-assign]


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _launch_count(ops: list[tuple[Any, ...]]) -> int:
    return sum(op[0] == "kernel_launched" for op in ops)


def _weights(update_every: int) -> str:
    return f"weights updated every {update_every} steps" if update_every else "read-only weights"


# -- sections ------------------------------------------------------------------------------------------


def bench_throughput(launches: int, depth: int, update_every: int, stubbed: bool = False) -> Iterator[Row]:
    """Launches per second on the same race-free churn trace (best of 3, runs interleaved).
    Live: each engine walks the whole stack as it does in use; `stubbed`: both get a constant."""
    trace = churn_trace(launches, update_every=update_every)
    ours_ops, csan_ops = _ours_ops(trace), _csan_ops(trace)
    n = _launch_count(trace)
    csan = _csan()
    capture: Callable[[], Stack] = (lambda: STUB_STACK) if stubbed else capture_stack
    csan_stacks = csan_stacks_stubbed if stubbed else contextlib.nullcontext
    ours_s, csan_s = [], []
    for _ in range(3):
        tracker = Tracker()
        # Defaults bind this round's objects (B023); lambdas, not partials, keep the frame counts.
        ours_calls = bind(ours_ops, tracker)
        ours_s.append(_timed(lambda c=ours_calls: at_depth(depth, lambda: feed_ours(c, capture))))
        assert tracker.errors == [], "the churn trace must be race-free for our engine"
        csan_calls = bind(csan_ops, csan.EventHandler())
        found: list[Any] = []
        with csan_stacks():
            csan_s.append(_timed(lambda f=found, c=csan_calls: f.extend(at_depth(depth, lambda: feed_csan(c)))))
        assert found == [], "the churn trace must be race-free for CSAN"
    ours_rate, csan_rate = n / min(ours_s), n / min(csan_s)
    stacks = "one constant stack in both" if stubbed else f"live stacks in both, {frames_walked(depth)} frames"
    target = STUBBED_TARGET if stubbed else LIVE_TARGET
    yield (
        f"launches/s ({n} launches, {_weights(update_every)}, {stacks})",
        f"{ours_rate:,.0f}",
        f"{csan_rate:,.0f}",
        f"{ours_rate / csan_rate:.1f}x (target >= {target:.0f}x)",
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


def _peak(fn: Callable[[], Any]) -> int:
    """Peak bytes traced while fn runs (what it allocates and keeps, or frees)."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


def bench_memory(launches: int, depth: int, update_every: int) -> Iterator[Row]:
    """Peak traced memory of each engine over a long churn (trace built before tracing starts),
    and ours over a quarter of it: bounded state stays flat as the trace grows."""
    csan = _csan()

    def ours(ops: list[tuple[Any, ...]]) -> int:
        calls = bind(ops, Tracker())  # before tracing: the calls are the trace's, not the engine's
        return _peak(lambda: at_depth(depth, lambda: feed_ours(calls)))

    def theirs(ops: list[tuple[Any, ...]]) -> int:
        calls = bind(ops, csan.EventHandler())
        return _peak(lambda: at_depth(depth, lambda: feed_csan(calls)))

    quarter_peak = ours(_ours_ops(churn_trace(launches // 4, update_every=update_every)))
    trace = churn_trace(launches, update_every=update_every)
    ours_peak = ours(_ours_ops(trace))
    csan_peak = theirs(_csan_ops(trace))
    yield (
        f"peak MiB over {_launch_count(trace)} launches, {_weights(update_every)}",
        f"{ours_peak / 2**20:.2f}",
        f"{csan_peak / 2**20:.2f}",
        f"{csan_peak / max(ours_peak, 1):.0f}x less; ours {quarter_peak / 2**20:.2f} MiB at a quarter of it",
    )


def bench_dispatch_overhead(depth: int) -> Iterator[Row]:
    """The torch integration's dispatch-mode cost per op (benchmarks/dispatch_bench.py)."""
    from dispatch_bench import bench_dispatch

    return bench_dispatch(30_000, depth)


SECTIONS: list[Callable[[argparse.Namespace], Iterator[Row]]] = [
    lambda a: bench_throughput(a.launches, a.depth, update_every=16),
    lambda a: bench_throughput(a.launches, a.depth, update_every=0),
    lambda a: bench_throughput(a.launches, a.depth, update_every=16, stubbed=True),
    lambda a: bench_write_after_reads(a.depth),
    lambda a: bench_memory(a.memory_launches, a.depth, update_every=0),
    lambda a: bench_memory(a.memory_launches, a.depth, update_every=16),
    lambda a: bench_dispatch_overhead(a.depth),
]


def _figure(row: Row, column: int) -> str:
    """A row's number (the ratio column's leading one), as the README row shows it."""
    return row[column].split("x")[0].split(" ")[0]


def readme_figures(rows: list[Row], depth: int) -> dict[str, str]:
    """README_FIGURES' fields from the rows, in SECTIONS' order."""
    live_updated, live_read_only, stubbed, *writes = rows[:7]
    memory_read_only, memory_updated, dispatch = rows[7], rows[8], rows[9]
    return {
        "frames": str(frames_walked(depth)),
        "live_updated": _figure(live_updated, 3),
        "live_read_only": _figure(live_read_only, 3),
        "stubbed": _figure(stubbed, 3),
        "write_ours": _figure(writes[-1], 1),
        "write_csan": _figure(writes[-1], 2),
        "memory_read_only_ours": _figure(memory_read_only, 1),
        "memory_read_only_csan": _figure(memory_read_only, 2),
        "memory_updated_ours": _figure(memory_updated, 1),
        "memory_updated_csan": _figure(memory_updated, 2),
        "dispatch": _figure(dispatch, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=100_000, help="launches for the throughput runs")
    parser.add_argument("--depth", type=int, default=30, help="extra stack frames under each call")
    parser.add_argument("--memory-launches", type=int, default=100_000, help="launches for the memory runs")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    for section in SECTIONS:
        rows.extend(section(args))
    print_table(rows, peer="CSAN")
    figures = README_FIGURES.format(**readme_figures(rows, args.depth))
    print(readme_row(Path(__file__).name, README_MEASURES, figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
