"""What the robustness tests and the soak script (benchmarks/fuzz_static.py) both run: a
hypothesis strategy of stream-heavy PyTorch snippets, hostile inputs for the file layer, and
the two sanitizer stress loads (engine events across threads; real torch ops on the emulated
device). The tests run them small, the soak script large; the code is the same.

Loaded by file path (tests/robustness/conftest.py, the soak script), not imported as a package.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

# -- stream-heavy snippets ------------------------------------------------------------------------

TENSORS = ("x", "y", "z", "buf")
STREAMS = ("side", "copy_stream")
EVENTS = ("done",)

_tensor = st.sampled_from(TENSORS)
_stream = st.sampled_from(STREAMS)
_event = st.sampled_from(EVENTS)
_value = st.one_of(
    st.just('torch.ones(4, device="cuda")'),
    st.just('torch.empty(4, device="cuda")'),
    st.builds("{} * 2".format, _tensor),
    st.builds("{} + {}".format, _tensor, _tensor),
    st.builds('{}.to("cuda", non_blocking=True)'.format, _tensor),
    st.builds("torch.empty_like({})".format, _tensor),
    st.builds("layer({})".format, _tensor),
    st.builds("{}.sum().item()".format, _tensor),
)
_simple = st.one_of(
    st.builds("{} = {}".format, _tensor, _value),
    st.builds("{}.add_({})".format, _tensor, _tensor),
    st.builds("{}.copy_({}, non_blocking=True)".format, _tensor, _tensor),
    st.builds("{}.wait_stream(torch.cuda.current_stream())".format, _stream),
    st.builds("torch.cuda.current_stream().wait_stream({})".format, _stream),
    st.builds("{}.record_stream({})".format, _tensor, _stream),
    st.builds("{}.record_stream(torch.cuda.current_stream())".format, _tensor),
    st.builds("{}.record({})".format, _event, _stream),
    st.builds("{} = torch.cuda.Event()".format, _event),
    st.builds("torch.cuda.current_stream().wait_event({})".format, _event),
    st.builds("{}.wait_event({})".format, _stream, _event),
    st.builds("{}.synchronize()".format, st.one_of(_stream, _event)),
    st.just("torch.cuda.synchronize()"),
    st.builds("del {}".format, _tensor),
    st.builds("{} = torch.cuda.Stream()".format, _stream),
    st.builds("out.append({})".format, _tensor),
    st.builds("{} = helper({}, {})".format, _tensor, _tensor, _stream),
    st.just("pass"),
)

Block = list[Any]
"""A statement is a string or (header, body[, else_body]); rendered by `render`."""


def _compound(body: st.SearchStrategy[Block]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.tuples(st.builds("with torch.cuda.stream({}):".format, _stream), body),
        st.tuples(st.just("with torch.cuda.stream(torch.cuda.default_stream()):"), body),
        st.tuples(st.just("for step in range(3):"), body),
        st.tuples(st.just("while flag:"), body),
        st.tuples(st.just("if flag:"), body, body),
        st.tuples(st.just("try:"), body),
        st.tuples(st.just("with torch.cuda.graph(graph):"), body),
        st.tuples(st.builds("def inner_{}():".format, st.integers(0, 3)), body),
        st.tuples(st.just("async def coroutine():"), body),
    )


_block: st.SearchStrategy[Block] = st.recursive(
    st.lists(_simple, min_size=1, max_size=4),
    lambda inner: st.lists(st.one_of(_simple, _compound(inner)), min_size=1, max_size=4),
    max_leaves=24,
)


def render(block: Block, indent: int = 1) -> list[str]:
    lines = []
    pad = "    " * indent
    for statement in block:
        if isinstance(statement, str):
            lines.append(pad + statement)
            continue
        header, body, *orelse = statement
        lines.append(pad + header)
        lines.extend(render(body, indent + 1))
        if header == "try:":
            lines.extend([pad + "except RuntimeError:", pad + "    raise"])
        for other in orelse:
            lines.append(pad + "else:")
            lines.extend(render(other, indent + 1))
    return lines


def _program(blocks: list[Block], returns: str | None) -> str:
    lines = [
        "import torch",
        "",
        "",
        "def helper(a, stream):",
        "    stream.wait_stream(torch.cuda.current_stream())",
        "    with torch.cuda.stream(stream):",
        "        return a * 2",
        "",
    ]
    for index, block in enumerate(blocks):
        lines += ["", f"def step_{index}(x, y, z, buf, side, copy_stream, done, layer, flag, graph, out):"]
        lines += render(block)
        if returns is not None:
            lines.append(f"    return {returns}")
        lines.append("")
    lines += ["", "side = torch.cuda.Stream()", "copy_stream = torch.cuda.Stream()"]
    return "\n".join(lines) + "\n"


stream_programs: st.SearchStrategy[str] = st.builds(
    _program, st.lists(_block, min_size=1, max_size=3), st.one_of(st.none(), _tensor)
)
"""Whole modules of stream-heavy functions; always valid Python (the tests check it compiles)."""


def check_findings(findings: list[Any], source: str, path: str) -> None:
    """What every result must be, whatever the input: located inside the file, known codes, a
    syntax error alone. Raises AssertionError otherwise."""
    from csan_lint.lint.registry import SYNTAX_ERROR_CODE, all_rules

    codes = {rule.code for rule in all_rules()} | {SYNTAX_ERROR_CODE}
    lines = source.count("\n") + 1
    for finding in findings:
        assert finding.path == path
        assert finding.code in codes, finding
        assert 1 <= finding.line <= lines and finding.column >= 1, finding
        assert finding.span.start_line <= finding.span.end_line <= lines, finding
    if any(finding.code == SYNTAX_ERROR_CODE for finding in findings):
        assert len(findings) == 1


# -- hostile inputs for the file layer -----------------------------------------------------------

HUGE_BYTES = 10 * 1024 * 1024


def huge_source(size: int = HUGE_BYTES) -> str:
    """About `size` bytes of Python that passes the prefilter (so it is parsed, not skipped)."""
    unit = "def f_{0}(x, s):\n    with torch.cuda.stream(s):\n        x.add_({0})\n\n\n"
    lines = ["import torch\n\n\n"]
    total, index = 0, 0
    while total < size:
        chunk = unit.format(index)
        lines.append(chunk)
        total += len(chunk)
        index += 1
    return "".join(lines)


def dense_stream_module(lines: int) -> str:
    """At least `lines` lines of stream-heavy functions, each calling the one before inside its
    stream block: events, waits, a block per 8 lines (a generated kernel wrapper's shape)."""
    unit = (
        "def step_{0}(x, s):\n"
        "    done = torch.cuda.Event()\n"
        "    s.wait_stream(torch.cuda.current_stream())\n"
        "    with torch.cuda.stream(s):\n"
        "        y = step_{1}(x, s) * 2\n"
        "        done.record(s)\n"
        "    torch.cuda.current_stream().wait_event(done)\n"
        "    return y\n\n"
    )
    units = ["import torch\n\n"]
    written, index = 2, 0
    while written < lines:
        units.append(unit.format(index, max(index - 1, 0)))
        written += 9
        index += 1
    return "".join(units)


def permissions_enforced(directory: Path) -> bool:
    """Whether chmod 000 makes a file unreadable here (not as root, not on some file systems)."""
    probe = directory / ".probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        probe.read_bytes()
    except PermissionError:
        return True
    finally:
        probe.chmod(0o600)
        probe.unlink()
    return False


# -- sanitizer stress ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StressResult:
    operations: int
    """Engine events (tracker load) or torch ops (torch load) actually run, summed over threads."""
    seconds: float
    errors: list[Any]
    internal_errors: list[str]
    peak_bytes: int
    """tracemalloc's peak during the load, measured from its start."""
    growth_bytes: int
    """Traced memory after the load less after the warm-up (a tenth of it): what stays."""
    stats: dict[str, int]


def _measured(run: Callable[[int], None], iterations: int) -> tuple[float, int, int]:
    """Runs a warm-up (a tenth) then the rest, under tracemalloc: (seconds, peak, growth)."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        start = time.perf_counter()
        warm = max(iterations // 10, 1)
        run(warm)
        after_warm_up, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run(iterations - warm)
        current, peak = tracemalloc.get_traced_memory()
        return time.perf_counter() - start, peak - after_warm_up, current - after_warm_up
    finally:
        if not tracing:
            tracemalloc.stop()


def tracker_stress(threads: int, iterations: int, race_every: int = 1000) -> StressResult:
    """Each thread, on its own two streams and its own recycled blocks, under one lock as the live
    sanitizer takes it: allocate, write on one stream, hand over by event, read on the other,
    hand back by event, free. Every `race_every` iterations it overwrites a block on the first
    stream before the read on the second is joined: a write-after-read, the same site each time,
    so exactly one (deduplicated) report per thread."""
    from csan_lint.runtime.events import Access
    from csan_lint.runtime.tracker import Tracker

    tracker, lock = Tracker(), threading.Lock()
    counts = [0] * threads

    def worker(index: int, count: int) -> None:
        first, second = 100 + 2 * index, 101 + 2 * index
        ready, done = 1000 + 2 * index, 1001 + 2 * index
        base = (index + 1) << 32
        events = 0
        with lock:
            tracker.stream_created(first)
            tracker.stream_created(second)
            tracker.event_created(ready)
            tracker.event_created(done)
        for k in range(count):
            racy = k % race_every == 0
            ptr = base if racy else base + (k % 8) * 4096
            write, read = Access(ptr, 4096, True, "self"), Access(ptr, 4096, False, "self")
            with lock:
                tracker.allocated(ptr, 4096, first)
                tracker.kernel_launched(first, "fill", [write])
                tracker.event_recorded(ready, first)
                tracker.event_waited(ready, second)
                tracker.kernel_launched(second, "consume", [read])
                if racy:
                    tracker.kernel_launched(first, "overwrite", [write])
                tracker.event_recorded(done, second)
                tracker.event_waited(done, first)
                tracker.freed(ptr)
            events += 9 if racy else 8
        counts[index] += events

    def run(count: int) -> None:
        workers = [threading.Thread(target=worker, args=(index, count)) for index in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()

    seconds, peak, growth = _measured(run, iterations)
    return StressResult(sum(counts) + 4 * threads, seconds, list(tracker.errors), [], peak, growth, tracker.stats())


def torch_stress(threads: int, iterations: int) -> StressResult:
    """Real torch ops under `csan_lint.runtime.sanitize()` on the emulated device: each thread
    produces on its own side stream, joins, records the result's use and drops it. Correct code:
    any report is a false positive, any internal error a bug."""
    import torch

    from csan_lint.runtime import sanitize

    counts = [0] * threads

    def worker(index: int, count: int, barrier: threading.Barrier) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        barrier.wait()
        ops = 0
        for k in range(count):
            with torch.cuda.stream(stream):
                x = torch.ones(64, device="cuda")
                y = x * 2
                y.add_(x)
                ops += 3
                if k % 50 == 0:
                    y.sum().item()
                    ops += 2
            torch.cuda.current_stream().wait_stream(stream)
            y.record_stream(torch.cuda.current_stream())
            del x, y
        counts[index] += ops

    with sanitize(device="emulated") as sanitizer:

        def run(count: int) -> None:
            barrier = threading.Barrier(threads)
            workers = [threading.Thread(target=worker, args=(index, count, barrier)) for index in range(threads)]
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join()

        seconds, peak, growth = _measured(run, iterations)
        stats = sanitizer.tracker.stats()
    return StressResult(
        sum(counts), seconds, list(sanitizer.errors), list(sanitizer.internal_errors), peak, growth, stats
    )
