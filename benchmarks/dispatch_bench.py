"""Dispatch-mode overhead: the sanitizer's TorchDispatchMode (op -> accesses, stack, tracker)
against a do-nothing TorchDispatchMode on the same op loop, at two stack depths, plus
the emulated device with and without checking (what `--confirm` adds to a test run).
Target: sanitizer mode <= 2x the do-nothing mode. Prints a table; asserts nothing.

    python benchmarks/dispatch_bench.py [--ops N]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from csan_lint.runtime import sanitize
from csan_lint.runtime.mode import SanitizerMode
from csan_lint.runtime.tracker import Tracker


class NothingMode(TorchDispatchMode):
    """Calls the op and returns: the floor any dispatch mode pays."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # same fast path as SanitizerMode, so the ratio is the sanitizer's own work

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class DefaultNothingMode(TorchDispatchMode):
    """A do-nothing mode as users write it (torch wraps it in torch._disable_dynamo)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _op_loop(ops: int, a: torch.Tensor, b: torch.Tensor) -> None:
    # No fresh outputs: on plain CPU no allocator callback announces them, and an engine
    # that had to backfill a new block per op would not be what a real run costs.
    c = torch.empty_like(a)
    for _ in range(ops // 3):
        torch.add(a, b, out=c)
        a.mul_(1.0)
        torch.mul(c, b, out=a)


def _deep(depth: int, fn: Callable[[], None]) -> None:
    """Run fn under `depth` extra Python frames (a model's call stack)."""
    if depth:
        _deep(depth - 1, fn)
    else:
        fn()


def _time(ops: int, depth: int, context: Callable[[], contextlib.AbstractContextManager], device: str) -> float:
    """Microseconds per op, best of 3."""
    best = float("inf")
    for _ in range(3):
        with context():
            a = torch.ones(16, device=device)
            b = torch.ones(16, device=device)
            start = time.perf_counter()
            _deep(depth, lambda: _op_loop(ops, a, b))
            best = min(best, time.perf_counter() - start)
    return best / (ops // 3 * 3) * 1e6


@contextlib.contextmanager
def _sanitizer_mode_on_cpu() -> Iterator[None]:
    """The sanitizer's mode and engine with every CPU tensor taken as a device tensor."""
    mode = SanitizerMode(
        Tracker(),
        is_device=lambda t: True,
        is_pinned=lambda t: False,
        current_stream=lambda: 0,
        on_internal_error=lambda exc: None,
    )
    with mode:
        yield


@contextlib.contextmanager
def _emulated(checking: bool) -> Iterator[None]:
    from csan_lint.runtime import emulation

    if checking:
        with sanitize(device="emulated"):
            yield
    else:
        with emulation.emulated():
            yield


def dispatch_overhead(ops: int = 30000) -> list[tuple[str, float, str]]:
    """Rows of (setting, us/op, ratio text)."""
    rows = []
    for depth in (0, 50):
        plain = _time(ops, depth, contextlib.nullcontext, "cpu")
        nothing = _time(ops, depth, NothingMode, "cpu")
        default_nothing = _time(ops, depth, DefaultNothingMode, "cpu")
        ours = _time(ops, depth, _sanitizer_mode_on_cpu, "cpu")
        rows += [
            (f"plain CPU ops (+{depth} frames)", plain, ""),
            (f"do-nothing mode, skip-dynamo (+{depth})", nothing, f"{nothing / plain:.1f}x plain"),
            (f"do-nothing mode, torch default (+{depth})", default_nothing, f"{default_nothing / plain:.1f}x plain"),
            (f"sanitizer mode (+{depth})", ours, f"{ours / nothing:.2f}x do-nothing (target <= 2x)"),
        ]
    emulated = _time(ops, 0, lambda: _emulated(False), "cuda")
    checked = _time(ops, 0, lambda: _emulated(True), "cuda")
    rows += [
        ("emulated device, checking off", emulated, ""),
        ("emulated device + sanitizer", checked, f"{checked / emulated:.2f}x checking off"),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=30000)
    options = parser.parse_args()
    rows = dispatch_overhead(options.ops)
    width = max(len(name) for name, _, _ in rows)
    print(f"{'setting':<{width}}  {'us/op':>7}  ratio")
    for name, micros, ratio in rows:
        print(f"{name:<{width}}  {micros:7.2f}  {ratio}")


if __name__ == "__main__":
    main()
