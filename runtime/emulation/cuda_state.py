"""`torch.cuda`'s memory statistics and random state on the emulated device: the counters
tests read (bytes of live device tensors) and the device's own generator."""

from __future__ import annotations

from typing import Any

import torch

from csan_lint.runtime.emulation import device as emulated
from csan_lint.runtime.emulation import streams


def memory_allocated(device: Any = None) -> int:
    streams.check_device(device)
    return emulated.memory.allocated


def max_memory_allocated(device: Any = None) -> int:
    streams.check_device(device)
    return emulated.memory.peak


def reset_peak_memory_stats(device: Any = None) -> None:
    streams.check_device(device)
    emulated.memory.peak = emulated.memory.allocated


def memory_stats(device: Any = None) -> dict[str, int]:
    """The caching allocator's counters that tests read (bytes of live device tensors)."""
    streams.check_device(device)
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = emulated.memory.allocated
        stats[f"{kind}.all.peak"] = emulated.memory.peak
    stats["num_alloc_retries"] = stats["num_ooms"] = 0
    return stats


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    stats = memory_stats(device)
    return (
        f"csan-lint emulated CUDA device: {stats['allocated_bytes.all.current']} bytes allocated, "
        f"peak {stats['allocated_bytes.all.peak']}"
    )


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes, as `cudaMemGetInfo` answers."""
    streams.check_device(device)
    total = streams.DeviceProperties.total_memory
    return total - emulated.memory.allocated, total


def manual_seed(seed: int) -> None:
    emulated.rng.generator.manual_seed(int(seed))


def seed() -> None:
    emulated.rng.generator.seed()


def initial_seed() -> int:
    return emulated.rng.generator.initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    streams.check_device(device)
    return emulated.rng.generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    streams.check_device(device)
    emulated.rng.generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [emulated.rng.generator.get_state()]


def set_rng_state_all(new_states: Any) -> None:
    for state in new_states:
        emulated.rng.generator.set_state(state)
