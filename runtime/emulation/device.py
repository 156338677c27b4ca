"""Device memory of the emulated CUDA device: plain CPU tensors whose storage is registered
as device memory (they report `cuda:0` through the attributes patched in tensors.py), and
the dispatch mode that runs ops on them.

Why this shape (checked on torch 2.13 CPU): a wrapper subclass with device "cuda" kills the
process as soon as an op takes a CUDA device guard, while plain CPU tensors run every kernel.
The registry is keyed by storage, so views share their base's device, and a weak reference
on the storage's (preserved) Python object tells when the last tensor using it dies: that is
the allocator's free. A TorchDispatchMode rewrites `device="cuda"` in factories, marks the
results of ops on device tensors, and fires the allocator's trace callbacks.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.cuda import _gpu_trace
from torch.utils._python_dispatch import TorchDispatchMode

from csan_lint.runtime.cuda_semantics import CAPTURE_FORBIDDEN, copy_effect, to_copy_pins_result
from csan_lint.runtime.emulation import autograd_streams, streams
from csan_lint.runtime.op_plans import HOST_SYNC, PLANS, OpPlan, plan_of

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
_aten = torch.ops.aten
_TensorBase = torch._C.TensorBase
_to_copy = _aten._to_copy.default


class _Block(weakref.ref[torch.UntypedStorage]):
    """A weak reference to a registered storage that remembers what its free must report."""

    __slots__ = ("key", "ptr", "size")
    key: int
    ptr: int
    size: int


class _Registry:
    """Storages by StorageImpl address; the entry goes when the storage dies."""

    def __init__(self, on_free: Any = None) -> None:
        self.blocks: dict[int, _Block] = {}
        self.on_free = on_free

    def add(self, storage: torch.UntypedStorage) -> _Block | None:
        key = storage._cdata
        if key in self.blocks:
            return None
        block = _Block(storage, self._released)
        block.key = key
        block.ptr = storage.data_ptr()
        block.size = storage.nbytes()
        self.blocks[key] = block
        return block

    def _released(self, block: _Block) -> None:
        if self.blocks.get(block.key) is block:
            del self.blocks[block.key]
            if self.on_free is not None:
                self.on_free(block)


class _Memory:
    """Device allocations: the registry plus `memory_allocated` bookkeeping."""

    def __init__(self) -> None:
        self.registry = _Registry(self._freed)
        self.allocated = 0
        self.peak = 0

    def _freed(self, block: _Block) -> None:
        if block.size:
            self.allocated -= block.size
            _gpu_trace.MemoryDeallocationCallbacks.fire_callbacks(block.ptr)

    def mark(self, tensor: torch.Tensor) -> None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            return  # no storage (sparse, nested): it cannot pass for a device tensor
        self.mark_storage(storage)

    def mark_storage(self, storage: torch.UntypedStorage) -> None:
        block = self.registry.add(storage)
        if block is not None and block.size:
            # The caching allocator does not trace zero-byte tensors: they get no block.
            self.allocated += block.size
            self.peak = max(self.peak, self.allocated)
            _gpu_trace.MemoryAllocationCallbacks.fire_callbacks(block.ptr)

    def resized(self, tensor: torch.Tensor) -> None:
        """A storage that grew moved to a new block: the allocator allocates it, then frees
        the old one."""
        storage = tensor.untyped_storage()
        block = self.registry.blocks.get(storage._cdata)
        if block is None:
            return
        ptr, size = storage.data_ptr(), storage.nbytes()
        if ptr == block.ptr:
            return
        old_ptr, old_size = block.ptr, block.size
        block.ptr, block.size = ptr, size
        self.allocated += size - old_size
        self.peak = max(self.peak, self.allocated)
        if size:
            _gpu_trace.MemoryAllocationCallbacks.fire_callbacks(ptr)
        if old_size:
            _gpu_trace.MemoryDeallocationCallbacks.fire_callbacks(old_ptr)


class _PinnedPool:
    """The caching host allocator behind `pin_memory()`: blocks of a power-of-two size, a
    freed one handed out again to a request of its size once no non-blocking copy that used it
    is pending (as CUDA's host allocator waits for the copy's event), kept until emptied."""

    def __init__(self) -> None:
        self.blocks: list[torch.UntypedStorage] = []
        self.copies: dict[int, tuple[int, int]] = {}  # block -> (stream, its launch count)

    def allocate(self, nbytes: int) -> torch.UntypedStorage:
        size = 1 << max(nbytes - 1, 0).bit_length()
        for block in self.blocks:
            if block.nbytes() == size and self._free(block):
                return block
        block = torch.UntypedStorage(size)
        pinned.add(block)
        self.blocks.append(block)
        return block

    def _free(self, block: torch.UntypedStorage) -> bool:
        if torch._C._storage_Use_Count(block._cdata) > 1:
            return False  # a tensor still uses it (the pool holds the other reference)
        copy = self.copies.get(block._cdata)
        return copy is None or not streams.pending(*copy)

    def copied(self, storage: torch.UntypedStorage) -> None:
        """A non-blocking copy on the current stream used pinned `storage`."""
        key = storage._cdata
        if any(block._cdata == key for block in self.blocks):
            handle = streams.current_handle()
            self.copies[key] = (handle, streams.launched.get(handle, 0))

    def empty_cache(self) -> None:
        """`torch._C._host_emptyCache()`: give back the free blocks."""
        self.blocks = [block for block in self.blocks if not self._free(block)]


memory = _Memory()
pinned = _Registry()
pinned_pool = _PinnedPool()
active = False


def reset() -> None:
    """Forget every device and pinned storage (leaving or entering the emulation); tensors
    of the old device die silently, with no free callback from a device that is gone."""
    global memory, pinned, pinned_pool
    memory.registry.on_free = None
    memory = _Memory()
    pinned = _Registry()
    pinned_pool = _PinnedPool()


def is_device(tensor: torch.Tensor) -> bool:
    """Whether `tensor` lives on the emulated device (hot path)."""
    try:
        return tensor.untyped_storage()._cdata in memory.registry.blocks
    except (RuntimeError, NotImplementedError, TypeError):
        return False  # no storage: sparse, nested, wrapper subclasses


def is_pinned_host(tensor: torch.Tensor) -> bool:
    try:
        return tensor.untyped_storage()._cdata in pinned.blocks
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _mark_all(out: Any) -> None:
    if isinstance(out, torch.Tensor):
        memory.mark(out)
    elif isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, torch.Tensor):
                memory.mark(item)


def _pin_all(out: Any) -> None:
    if isinstance(out, torch.Tensor) and out.layout == torch.strided:
        pinned.add(out.untyped_storage())


def copied(to_host: bool, host: torch.UntypedStorage, non_blocking: bool) -> None:
    """A copy between `host` and the device on the current stream: what CUDA does after it."""
    effect = copy_effect(to_host, host._cdata in pinned.blocks, non_blocking)
    if effect.host_syncs:
        if effect.sync_traced:
            sync_current()
        else:  # the host waited, and no callback says so
            streams.mark_done(streams.current_handle())
    if effect.host_pending:
        pinned_pool.copied(host)


def sync_current() -> None:
    """A blocking copy between host and device: CUDA syncs the current stream (and traces it)."""
    handle = streams.current_handle()
    streams.forbid_during_capture(handle)
    _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(handle)
    streams.mark_done(handle)


# -- per-op plans ---------------------------------------------------------------------------

# Ops the emulation treats specially, by id of their overload (the rest: `_PLAIN`).
_PLAIN, _COPY_TO, _COPY_INTO, _RECORD_STREAM, _RESIZE = range(5)
_SPECIAL = {
    id(_to_copy): _COPY_TO,
    id(_aten.copy_.default): _COPY_INTO,
    id(_aten.record_stream.default): _RECORD_STREAM,
    id(_aten.resize_.default): _RESIZE,
    id(_aten.resize_as_.default): _RESIZE,
}
# Set while a call in which the user named the host (`.cpu()`, `zeros_like(x, device="cpu")`)
# is dispatched: torch's own C++ names the CPU too, meaning "the same device" (see `_special`).
_host_named = threading.local()


@contextmanager
def naming_host() -> Iterator[None]:
    previous = getattr(_host_named, "active", False)
    _host_named.active = True
    try:
        yield
    finally:
        _host_named.active = previous


def _scan(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, bool]:
    """(any device tensor, any host tensor with data dimensions) among the arguments."""
    on_device = on_host = False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if is_device(value):
                on_device = True
            elif value.dim():
                on_host = True
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    if is_device(item):
                        on_device = True
                    elif item.dim():
                        on_host = True
    return on_device, on_host


class _CudaRng:
    """The device's own generator: seeded ops on device tensors draw from it, so
    `torch.cuda.manual_seed` reproduces device randomness without touching the CPU stream."""

    def __init__(self) -> None:
        self.generator = torch.Generator()
        self.lock = threading.Lock()

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        host = torch.default_generator
        with self.lock:
            saved = host.get_state()
            host.set_state(self.generator.get_state())
            try:
                return func(*args, **kwargs)
            finally:
                self.generator.set_state(host.get_state())
                host.set_state(saved)


rng = _CudaRng()


class DeviceMode(TorchDispatchMode):
    """Runs ops on the CPU while keeping device tensors on the device."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo: ~3 us per op.
        return False

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        if not active:
            return func(*args, **kwargs)  # a thread that outlived the emulation
        plan = PLANS.get(id(func)) or plan_of(func)
        special = _SPECIAL.get(id(func), _PLAIN)
        device = kwargs.get("device")
        to_device = False
        if device is not None:
            if device.type == "cuda":
                streams.check_device(device)
                kwargs = {**kwargs, "device": CPU}
                to_device = True
            elif kwargs.get("pin_memory"):
                kwargs = {**kwargs, "pin_memory": False}
                out = func(*args, **kwargs)
                _pin_all(out)
                return out
            elif special == _PLAIN and getattr(_host_named, "active", False):
                return func(*args, **kwargs)
        on_device, on_host = _scan(args, kwargs)
        if not (on_device or to_device):
            if special == _PLAIN:
                return func(*args, **kwargs)
            return _special(special, func, args, kwargs, False, False)
        if on_host and plan.pointwise:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
            )
        # As on CUDA, the host waits for the current stream after these (a traced sync).
        host_sync = on_device and plan.kind == HOST_SYNC and plan.syncs_host(args, kwargs)
        if streams.capturing:
            graph = streams.capturing.get(streams.current_handle())
            # Allocator bookkeeping (record_stream, resize_) happens at once, even in a capture.
            if graph is not None and special not in (_RECORD_STREAM, _RESIZE):
                if host_sync:
                    raise RuntimeError(CAPTURE_FORBIDDEN)
                return graph.record(
                    func, plan, args, kwargs, lambda: _execute(plan, special, func, args, kwargs, on_device, to_device)
                )
        if special != _RECORD_STREAM:
            streams.note_launch(autograd_streams.op_stream())
        out = _execute(plan, special, func, args, kwargs, on_device, to_device)
        if on_device:
            # Also under no_grad: a custom Function's node is made before its forward runs.
            autograd_streams.tag_forward()
        if host_sync:
            sync_current()
        return out


def _execute(
    plan: OpPlan,
    special: int,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    on_device: bool,
    to_device: bool,
) -> Any:
    if special == _PLAIN:
        return run(func, plan, args, kwargs)
    return _special(special, func, args, kwargs, on_device, to_device)


def run(func: Any, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an op on device tensors: device randomness, results on the device."""
    out = rng.run(func, args, kwargs) if plan.seeded else func(*args, **kwargs)
    if plan.fresh:
        _mark_all(out)
    return out


def _special(
    kind: int, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool, to_device: bool
) -> Any:
    if kind == _COPY_TO:
        # _to_copy: to the device when asked (`device="cuda"`), to the host when the user
        # asked (`.cpu()`, `.to("cpu")`), else where the source is: torch's own code (a
        # backward formula) names the device it sees, the CPU, meaning "the same device".
        source_on_device = is_device(args[0])
        target_device = to_device or (source_on_device and not getattr(_host_named, "active", False))
        non_blocking = kwargs.get("non_blocking", False)
        to_host = source_on_device and not target_device
        pin = kwargs.get("pin_memory") or to_copy_pins_result(to_host, non_blocking)
        if kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}
        out = func(*args, **kwargs)
        if target_device:
            memory.mark(out)
        elif pin:
            pinned.add(out.untyped_storage())
        if source_on_device != target_device:
            copied(to_host, (out if to_host else args[0]).untyped_storage(), non_blocking)
        return out
    if kind == _COPY_INTO:
        destination, source = args[0], args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        out = func(*args, **kwargs)
        to_host = is_device(source)
        if is_device(destination) != to_host:
            copied(to_host, (destination if to_host else source).untyped_storage(), non_blocking)
        return out
    if kind == _RESIZE:
        out = func(*args, **kwargs)
        if on_device:
            memory.resized(args[0])
        return out
    # _RECORD_STREAM: bookkeeping of the caching allocator; nothing to do on the CPU.
    if on_device:
        return None
    return func(*args, **kwargs)
