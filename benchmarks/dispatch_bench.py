"""Dispatch-mode overhead: the sanitizer's TorchDispatchMode (op -> accesses, stack, tracker)
against a do-nothing TorchDispatchMode on the same op loop, at two stack depths; then, on the
emulated device, the whole sanitizer against the emulation alone and against CSAN's own
dispatch mode. Target: sanitizer mode <= 2x the do-nothing mode. Prints ratios, asserts nothing.

    python benchmarks/dispatch_bench.py [--ops N] [--depth D]

`bench_dispatch` is also a section of `benchmarks/runtime_bench.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.cuda._gpu_trace as gpu_trace
from bench_table import Row, print_table, readme_row
from torch.utils._python_dispatch import TorchDispatchMode

from csan_lint.runtime import emulation, sanitize
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.tracker import Tracker

TARGET = 2.0
"""The sanitizer mode's cost per op over a do-nothing mode's."""

README_MEASURES = "the dispatch mode per op against a do-nothing mode; the whole sanitizer on the emulated device"
README_FIGURES = (
    "{shallow}x at the loop's depth, {deep}x {depth} frames deeper (target 2x); emulated device: {emulated}x"
    " the emulation alone, {csan}x faster than CSAN's mode"
)
"""The README row this script prints; tests/docs checks README's row has this shape."""


class NothingMode(TorchDispatchMode):
    """Calls the op and returns: the floor any dispatch mode pays."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # the same fast path as SanitizerMode: the ratio is the sanitizer's own work

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class DefaultNothingMode(TorchDispatchMode):
    """A do-nothing mode as users write it: torch wraps it in torch._disable_dynamo."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _op_loop(ops: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    # In place and out= only, no Python numbers (they become fresh 0-dim tensors): on plain
    # CPU no allocator callback announces fresh memory, and backfilling a new block per op
    # is not what a real run costs.
    for _ in range(ops // 3):
        torch.add(a, b, out=c)
        a.mul_(b)
        torch.mul(c, b, out=a)


def _at_depth(depth: int, fn: Callable[[], None]) -> None:
    """Run fn under `depth` extra Python frames (a model's or a test runner's call stack)."""
    if depth:
        _at_depth(depth - 1, fn)
    else:
        fn()


def _per_op(ops: int, depth: int, context: Callable[[], Any], device: str) -> float:
    """Microseconds of this process's CPU time per op, best of 5 (CPU time: other processes on
    a busy machine do not count)."""
    best = float("inf")
    for _ in range(5):
        with context():
            a, b, c = (torch.ones(64, device=device) for _ in range(3))
            torch.cuda.synchronize() if device == "cuda" else None
            gc.collect()
            start = time.process_time()
            # Defaults bind this round's tensors (B023); a lambda, not a partial, keeps the frame count.
            _at_depth(depth, lambda a=a, b=b, c=c: _op_loop(ops, a, b, c))
            best = min(best, time.process_time() - start)
            del a, b, c
    return best / (ops // 3 * 3) * 1e6


# `_per_op` stands for a test runner calling a test: as under `pytest --csan`, stack walks
# stop at its frame, so the harness's own frames are not counted as the user's.
RUNNER_STOP = {id(_per_op.__code__)}


@contextlib.contextmanager
def _sanitizer_mode_on_cpu() -> Iterator[None]:
    """The sanitizer's mode and engine, every CPU tensor taken for a device tensor."""
    mode = SanitizerMode(
        Tracker(),
        is_device=lambda t: True,
        is_pinned=lambda t: False,
        current_stream=lambda: 0,
        on_internal_error=lambda exc: None,
    )
    mode.stack_stop = RUNNER_STOP
    with mode:
        yield


@contextlib.contextmanager
def _sanitized() -> Iterator[None]:
    with sanitize(device="emulated") as sanitizer:
        sanitizer.stack_stop.update(RUNNER_STOP)
        yield


@contextlib.contextmanager
def _csan_mode() -> Iterator[None]:
    """torch's CSAN dispatch mode on the emulated device; its trace callbacks (which it never
    unregisters) are taken out again afterwards so they do not slow the other runs."""
    from torch.cuda._sanitizer import CUDASanitizerDispatchMode

    registries = [v for v in vars(gpu_trace).values() if hasattr(v, "callback_list")]
    before = {id(r): list(r.callback_list) for r in registries}
    with emulation.emulated(), CUDASanitizerDispatchMode():
        yield
    for registry in registries:
        registry.callback_list[:] = before[id(registry)]


def bench_dispatch(ops: int, depth: int) -> Iterator[Row]:
    """Rows of (measure, csan-lint, other, ratio)."""
    for frames in sorted({0, depth}):
        nothing = _per_op(ops, frames, NothingMode, "cpu")
        ours = _per_op(ops, frames, _sanitizer_mode_on_cpu, "cpu")
        default = _per_op(ops, frames, DefaultNothingMode, "cpu")
        yield (
            f"us/op, mode vs do-nothing mode (CPU ops, +{frames} frames)",
            f"{ours:.2f}",
            f"{nothing:.2f}",
            f"{ours / nothing:.2f}x (target <= {TARGET:.0f}x)",
        )
        yield (
            f"us/op, mode vs do-nothing mode as users write it (+{frames})",
            f"{ours:.2f}",
            f"{default:.2f}",
            f"{ours / default:.2f}x",
        )
    alone = _per_op(ops, 0, emulation.emulated, "cuda")
    checked = _per_op(ops, 0, _sanitized, "cuda")
    csan = _per_op(ops, 0, _csan_mode, "cuda")
    yield (
        "us/op, emulated device: sanitizer vs emulation alone",
        f"{checked:.2f}",
        f"{alone:.2f}",
        f"{checked / alone:.2f}x",
    )
    yield (
        "us/op, emulated device: sanitizer vs CSAN's mode",
        f"{checked:.2f}",
        f"{csan:.2f}",
        f"{csan / checked:.1f}x faster",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=30_000)
    parser.add_argument("--depth", type=int, default=30, help="extra stack frames under the op loop")
    options = parser.parse_args()
    rows = list(bench_dispatch(options.ops, options.depth))
    print_table(rows, peer="other")
    shallow, _, deep, _, emulated, csan = (row[3].split("x")[0] for row in rows)
    figures = README_FIGURES.format(shallow=shallow, deep=deep, depth=options.depth, emulated=emulated, csan=csan)
    print(readme_row(Path(__file__).name, README_MEASURES, figures))


if __name__ == "__main__":
    main()
