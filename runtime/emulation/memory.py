"""Device memory of the emulated CUDA device: which host storages are device storages, and
the caching allocator (allocator.py) that places them.

A device tensor is a plain CPU tensor whose storage is registered here. Its storage aliases a
block of an emulated segment (a storage made on the block's address that holds the segment
alive), so a freed block's address comes back to the next request of its size class on its
stream, as on a GPU. An op's result is made by the CPU kernel, then moved into a block of the
allocator (a copy of its bytes, none for `empty`) and the result pointed at it (`set_`): the
kernels need no change, and the allocator decides every address. A weak reference on the
block storage's (preserved) Python object tells when the last tensor using it dies: that is
the allocator's free. Such a storage cannot be resized in place (its memory is not its own):
`resize_` moves the tensor to a new block, as CUDA's does, and an `out=` kernel that resizes
its output gets a resizable copy first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable

import torch
from torch.cuda import _gpu_trace

from csan_lint.runtime.emulation import allocator, current, streams
from csan_lint.runtime.emulation.gaps import EmulationGap


class Block(weakref.ref[torch.UntypedStorage]):
    """A weak reference to a registered storage that remembers what its free must report."""

    __slots__ = ("key", "ptr", "size", "block", "device")
    key: int
    ptr: int
    size: int
    block: allocator.Block | None  # None: a storage the allocator did not place (zero bytes)
    device: int


class Registry:
    """Storages by StorageImpl address; the entry goes when the storage dies."""

    def __init__(self, on_free: Callable[[Block], None] | None = None) -> None:
        self.blocks: dict[int, Block] = {}
        self.on_free = on_free

    def add(self, storage: torch.UntypedStorage, block: allocator.Block | None = None, device: int = 0) -> Block | None:
        key = storage._cdata
        if key in self.blocks:
            return None
        entry = Block(storage, self._released)
        entry.key = key
        entry.ptr = storage.data_ptr()
        entry.size = storage.nbytes()
        entry.block = block
        entry.device = device
        self.blocks[key] = entry
        return entry

    def _released(self, entry: Block) -> None:
        if self.blocks.get(entry.key) is entry:
            del self.blocks[entry.key]
            if self.on_free is not None:
                self.on_free(entry)


class DeviceMemory:
    """The devices' storages and a caching allocator per device."""

    def __init__(self, capacity: int, devices: int = 1) -> None:
        self.registry = Registry(self._freed)
        self.allocators = [
            allocator.CachingAllocator(capacity, streams.pending, _launches, device) for device in range(devices)
        ]

    @property
    def allocator(self) -> allocator.CachingAllocator:
        """The current device's allocator."""
        return self.allocators[current.current_index()]

    def _freed(self, entry: Block) -> None:
        if entry.block is not None:
            self.allocators[entry.device].free(entry.block)
        if entry.size:
            _gpu_trace.MemoryDeallocationCallbacks.fire_callbacks(entry.ptr)

    def new_storage(self, nbytes: int) -> torch.UntypedStorage:
        """A storage of `nbytes` on the current device from its allocator (its bytes undefined)."""
        device = current.current_index()
        if not nbytes:
            storage = torch.UntypedStorage(0)
            self.registry.add(storage, device=device)
            return storage
        stream = current.current_handle()
        graph = streams.capturing.get(stream) if streams.capturing else None
        block = self.allocators[device].malloc(nbytes, stream if graph is None else graph.pool_key())
        storage = allocator.block_storage(block, nbytes)
        self.registry.add(storage, block, device)
        _gpu_trace.MemoryAllocationCallbacks.fire_callbacks(block.ptr)
        return storage

    def place(self, tensors: Iterable[torch.Tensor], copy: bool = True) -> None:
        """Make the fresh results of a host kernel device tensors, in blocks of the allocator
        (`copy`: their bytes too; not for `empty`, whose bytes are undefined). Results sharing
        a storage share the block. Call with no dispatch mode active (inside one's handler)."""
        moved: dict[int, torch.UntypedStorage] = {}
        for tensor in tensors:
            if tensor.layout != torch.strided:
                raise EmulationGap(f"{tensor.layout} tensors on the device")
            if tensor.is_quantized:
                raise EmulationGap("quantized tensors on the device")
            try:
                storage = tensor.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                continue  # no storage: it cannot pass for a device tensor
            key = storage._cdata
            if key in self.registry.blocks:
                continue
            target = moved.get(key)
            if target is None:
                target = moved[key] = self.new_storage(storage.nbytes())
                if copy and storage.nbytes():
                    target.copy_(storage)
            tensor.set_(target, tensor.storage_offset(), tensor.shape, tensor.stride())

    def grow(self, tensor: torch.Tensor, nbytes: int) -> None:
        """`resize_` past the storage: a new block holding the old bytes (CUDA's resize)."""
        old = tensor.untyped_storage()
        target = self.new_storage(nbytes)
        if old.nbytes():
            _bytes(target)[: old.nbytes()].copy_(_bytes(old))
        tensor.set_(target, tensor.storage_offset(), tensor.shape, tensor.stride())

    def unplace(self, tensor: torch.Tensor) -> None:
        """Give `tensor` a resizable storage of its own (an `out=` kernel resizes it): a new
        allocation, outside the allocator's segments."""
        old = tensor.untyped_storage()
        entry = self.registry.blocks.get(old._cdata)
        if entry is None or entry.block is None:
            return
        target = torch.UntypedStorage(old.nbytes())
        target.copy_(old)
        if self.registry.add(target, device=entry.device) is not None and target.nbytes():
            _gpu_trace.MemoryAllocationCallbacks.fire_callbacks(target.data_ptr())
        # The kernel set the new shape before it failed: the tensor is empty until it resizes.
        tensor.set_(target, tensor.storage_offset(), (0,), (1,))

    def is_block(self, storage: torch.UntypedStorage) -> bool:
        """Whether `storage` is in one of the allocator's blocks."""
        entry = self.registry.blocks.get(storage._cdata)
        return entry is not None and entry.block is not None

    def record_stream(self, tensor: torch.Tensor, stream: int) -> None:
        entry = self.registry.blocks.get(tensor.untyped_storage()._cdata)
        if entry is not None and entry.block is not None:
            self.allocators[entry.device].record_stream(entry.block, stream)

    def resized(self, tensor: torch.Tensor) -> None:
        """A storage outside the segments that a kernel grew moved to new memory: the
        allocator allocates it, then frees the old one."""
        storage = tensor.untyped_storage()
        entry = self.registry.blocks.get(storage._cdata)
        if entry is None:
            return
        ptr, size = storage.data_ptr(), storage.nbytes()
        if ptr == entry.ptr:
            return
        old_ptr, old_size = entry.ptr, entry.size
        entry.ptr, entry.size = ptr, size
        if size:
            _gpu_trace.MemoryAllocationCallbacks.fire_callbacks(ptr)
        if old_size:
            _gpu_trace.MemoryDeallocationCallbacks.fire_callbacks(old_ptr)


def _bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _launches(stream: int) -> int:
    return streams.launched.get(stream, 0)
