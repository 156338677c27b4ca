"""`torch.cuda`'s memory statistics and random state on the emulated device: the caching
allocator's counters (allocator.py) and the device's own generator."""

from __future__ import annotations

from typing import Any

import torch

from csan_lint.runtime.emulation import current, streams
from csan_lint.runtime.emulation import device as emulated
from csan_lint.runtime.emulation.allocator import CachingAllocator, Statistics


def _allocator(device: Any) -> CachingAllocator:
    return emulated.memory.allocators[current.check_device(device)]


def memory_allocated(device: Any = None) -> int:
    return _allocator(device).stats.current[Statistics.ALLOCATED_BYTES]


def max_memory_allocated(device: Any = None) -> int:
    return _allocator(device).stats.peak[Statistics.ALLOCATED_BYTES]


def memory_reserved(device: Any = None) -> int:
    return _allocator(device).stats.current[Statistics.RESERVED_BYTES]


def max_memory_reserved(device: Any = None) -> int:
    return _allocator(device).stats.peak[Statistics.RESERVED_BYTES]


def reset_peak_memory_stats(device: Any = None) -> None:
    _allocator(device).stats.reset_peaks()


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _allocator(device).stats.reset_accumulated()


def memory_stats(device: Any = None) -> dict[str, int]:
    """The caching allocator's counters, under `torch.cuda.memory_stats`'s keys."""
    return dict(_allocator(device).memory_stats())


def empty_cache() -> None:
    """Every device's free segments (c10 empties each device's allocator)."""
    for allocator in emulated.memory.allocators:
        allocator.empty_cache()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    return (
        f"csan-lint emulated CUDA device: {stats['allocated_bytes.all.current']} bytes allocated "
        f"(peak {stats['allocated_bytes.all.peak']}), {stats['reserved_bytes.all.current']} reserved "
        f"(peak {stats['reserved_bytes.all.peak']})"
    )


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes, as `cudaMemGetInfo` answers: what no segment holds."""
    allocator = _allocator(device)
    return allocator.capacity - memory_reserved(device), allocator.capacity


def manual_seed(seed: int) -> None:
    emulated.rng.generator.manual_seed(int(seed))


def seed() -> None:
    emulated.rng.generator.seed()


def initial_seed() -> int:
    return emulated.rng.generator.initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    current.check_device(device)
    return emulated.rng.generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    current.check_device(device)
    emulated.rng.generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """One state per device: the devices share one generator."""
    return [emulated.rng.generator.get_state() for _ in range(streams.device_count())]


def set_rng_state_all(new_states: Any) -> None:
    for state in new_states:
        emulated.rng.generator.set_state(state)
