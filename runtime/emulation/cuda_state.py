"""`torch.cuda`'s memory statistics and random state on the emulated device: the caching
allocator's counters (allocator.py) and each device's own generator."""

from __future__ import annotations

from typing import Any

import torch

from csan_lint.runtime.emulation import current, machine
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


def _generator(device: Any = None) -> torch.Generator:
    """The generator of `device` (None, "cuda": the current device's)."""
    return emulated.rng.of(current.check_device(device))


def manual_seed(seed: int) -> None:
    """`torch.cuda.manual_seed`: the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(machine.DEVICE_COUNT):
        emulated.rng.of(index).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    """As torch's: a random seed drawn on device 0, then given to every device."""
    manual_seed_all(emulated.rng.of(0).seed())


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [emulated.rng.of(index).get_state() for index in range(machine.DEVICE_COUNT)]


def set_rng_state_all(new_states: Any) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
