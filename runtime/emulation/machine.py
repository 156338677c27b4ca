"""The emulated machine: how many devices it has (`CSAN_LINT_DEVICES`), what each device
reports about itself, and the answers of `torch.cuda` calls that have nothing to do on it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

DEVICES_VARIABLE = "CSAN_LINT_DEVICES"
MAX_DEVICES = 64
DEVICE_COUNT = 1
"""How many devices the machine has now (read from `CSAN_LINT_DEVICES` when the emulation starts)."""


def device_count_from_environment() -> int:
    """How many devices the emulated machine has: `CSAN_LINT_DEVICES`, else 1."""
    text = os.environ.get(DEVICES_VARIABLE, "").strip()
    if not text:
        return 1
    if not text.isdigit() or not 1 <= int(text) <= MAX_DEVICES:
        raise ValueError(f"{DEVICES_VARIABLE}: expected a number of devices from 1 to {MAX_DEVICES}, got {text!r}")
    return int(text)


class DeviceProperties:
    """What `get_device_properties` answers: a plausible modern GPU."""

    name = "csan-lint emulated CUDA device"
    major = 9
    minor = 0
    total_memory = 80 * 2**30
    multi_processor_count = 132
    is_integrated = False
    is_multi_gpu_board = False
    warp_size = 32

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor})"


class Nvtx:
    """NVTX ranges and marks: annotations for a profiler, nothing to do here (the CPU
    build's stub raises instead)."""

    def __getattr__(self, name: str) -> Callable[..., int]:
        return returns(0)


def no_op(*args: Any, **kwargs: Any) -> None:
    """For the calls that have nothing to do on an emulated device (`empty_cache`, `init`)."""


def returns(value: Any) -> Callable[..., Any]:
    def answer(*args: Any, **kwargs: Any) -> Any:
        return value

    return answer
