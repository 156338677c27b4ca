"""The bytes a tensor stands for, as the engine names memory: the block holding it and the
extent it touches. Shared by the dispatch mode (mode.py), the host blocks it watches
(host_blocks.py) and the wrapped entry points (entry_points.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def byte_extent(tensor: torch.Tensor) -> tuple[int, int]:
    """[ptr, ptr + size) from the tensor's lowest to its highest byte; size 0 when empty."""
    numel = tensor.numel()
    if numel == 0:
        return tensor.data_ptr(), 0
    item = tensor.element_size()
    if tensor.is_contiguous():
        return tensor.data_ptr(), numel * item
    low = high = 0
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        reach = (size - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return tensor.data_ptr() + low * item, (high - low + 1) * item


def storage_base(tensor: torch.Tensor) -> int:
    """The address of the block holding the tensor (what the allocator's callbacks name)."""
    # storage_offset() is typed int | SymInt: a symbolic offset exists only under tracing, not here.
    return tensor.data_ptr() - int(tensor.storage_offset()) * tensor.element_size()
