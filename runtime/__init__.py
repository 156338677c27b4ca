"""The dynamic half: a happens-before sanitizer for CUDA streams (engine, torch integration,
emulated device, pytest plugin). Importing this package does not import torch: the
entry points below import the torch-dependent parts when called."""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from csan_lint.runtime.sanitizer import Sanitizer

__all__ = ["enable", "sanitize"]


@contextlib.contextmanager
def sanitize(device: str = "auto", trace_out: IO[str] | None = None) -> Iterator[Sanitizer]:
    """Check the CUDA stream usage of the block; the reports are in `.errors` afterwards.

    `device` is "auto" (real CUDA when torch sees it, else the emulated device), "cuda" or
    "emulated"; `trace_out`, a text file, receives the event trace (`csan-lint --replay`).
    """
    from csan_lint.runtime.sanitizer import Sanitizer

    sanitizer = Sanitizer(device, trace_out)
    sanitizer.enable()
    try:
        yield sanitizer
    finally:
        sanitizer.disable()


_global: Sanitizer | None = None


def enable(device: str = "auto", trace_out: IO[str] | None = None) -> Sanitizer:
    """Check the rest of the program (like `TORCH_CUDA_SANITIZER=1`); the reports are
    printed to stderr at exit. Calling it again returns the running sanitizer."""
    global _global
    if _global is None:
        from csan_lint.runtime.sanitizer import Sanitizer

        _global = Sanitizer(device, trace_out).enable()
        atexit.register(_report_at_exit, _global)
    return _global


def _report_at_exit(sanitizer: Sanitizer) -> None:
    from csan_lint.runtime.report import render_text

    sanitizer.disable()
    for report in sanitizer.errors:
        print(render_text(report), file=sys.stderr)
    for message in sanitizer.internal_errors:
        print(f"csan: internal error: {message}", file=sys.stderr)
