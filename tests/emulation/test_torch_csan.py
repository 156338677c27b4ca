"""torch's own CUDA Stream Sanitizer as an oracle: listening to the `_gpu_trace` callbacks
and dispatching like on a GPU, it gives the emulated device the verdicts its docs show."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import torch
from csan_lint.runtime import emulation

emulation.activate()
import torch.cuda._sanitizer as csan

csan.enable_cuda_sanitizer()


def race(fixed):
    a = torch.rand(10000, device="cuda")
    side = torch.cuda.Stream()
    if fixed:
        side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            torch.mul(a, 5, out=a)
    except csan.CUDASanitizerErrors as errors:
        first = errors.errors[0]
        return f"race on stream {side.cuda_stream}: {first.current_access.stream} after {first.previous_access.stream}"
    return "clean"


print(race(fixed=False))
print(race(fixed=True))
"""


def test_torch_csan_flags_the_docs_example_and_accepts_its_fix():
    # In a child process: CSAN cannot be switched off once enabled.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    unsafe, fixed = done.stdout.strip().splitlines()[-2:]
    handle = unsafe.split()[3].rstrip(":")
    assert unsafe == f"race on stream {handle}: {handle} after 0"
    assert int(handle) != 0
    assert fixed == "clean"
