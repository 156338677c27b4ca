"""What the emulated device cannot do (yet), said as such: a test that fails on it failed on the
emulation, not on its own code, and the verdict layer must not read it as the user's failure.

The emulation raises `EmulationGap` where it knows it stops; `gap_of` also recognizes the CPU
build's own errors that reach a test when the emulation did not intercept a call ("no pinned
memory allocator", "Torch not compiled with CUDA enabled", a `torch._C._cuda_*` binding the CPU
build lacks): read on an emulated device, they mean a gap, never that the system lacks a GPU.
"""

from __future__ import annotations

import os
import re
import traceback

import torch

from csan_lint import REPOSITORY_URL

ISSUES_URL = f"{REPOSITORY_URL}/issues"
CODE_WIDTH = 80
"""A gap names the program's call by its source line, cut to this many characters."""


class EmulationGap(RuntimeError):
    """An operation the emulated CUDA device does not support: the emulation's fault, not the
    program's. A RuntimeError, as CUDA's own errors are, so code that catches those still does."""

    def __init__(self, op: str) -> None:
        self.op = op
        super().__init__(gap_message(op))


def gap_message(op: str) -> str:
    return f"the emulated device does not support {op}: please report it ({ISSUES_URL})"


_CPU_BUILD_ERRORS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), feature)
    for pattern, feature in (
        (r"no pinned memory allocator|pin_memory=True requires", "pinned host memory here"),
        (r"Cannot access accelerator device when none is available", "this device argument"),
        (r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA GPUs are available", "this CUDA call"),
        (r"DefaultCPUAllocator: can't allocate memory", "running out of device memory (torch.OutOfMemoryError)"),
        (r"module 'torch\._C' has no attribute '(_cuda\w*|_cudart|_nccl\w*|_cudnn\w*)'", "`torch._C.{0}`"),
    )
)
"""The CPU build's errors for CUDA work, and the feature each means the emulation missed."""
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""csan-lint's runtime (the emulation, the sanitizer): a gap's op is named at the innermost frame
outside it and torch, the call the program made."""


def gap_of(error: BaseException) -> str | None:
    """The gap message when `error` is the emulated device's own (an `EmulationGap`, or a CPU-build
    error the emulation let through), naming the op and where the program called it; else None."""
    op = error.op if isinstance(error, EmulationGap) else None
    for pattern, feature in () if op else _CPU_BUILD_ERRORS:
        match = pattern.search(str(error))
        if match is not None:
            op = feature.format(*match.groups())
            break
    if op is None:
        return None
    where = _call_site(error)
    return gap_message(op + (f", called as {where}" if where else ""))


def _call_site(error: BaseException) -> str | None:
    """`code` at file:line of the innermost frame of the program (not torch, not csan-lint)."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    outside = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not os.path.abspath(frame.filename).startswith((torch_dir, _RUNTIME_DIR))
    ]
    if not outside:
        return None
    frame = outside[-1]
    line = (frame.line or "").strip()
    code = f"`{line if len(line) <= CODE_WIDTH else line[: CODE_WIDTH - 3] + '...'}` at " if line else ""
    return f"{code}{os.path.basename(frame.filename)}:{frame.lineno}"
