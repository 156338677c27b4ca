"""The dispatch mode of the emulated CUDA device, and its pinned host memory: device tensors
are plain CPU tensors whose storage is registered as device memory (memory.py; they report
`cuda:0` through the attributes patched in tensors.py).

Why this shape (checked on torch 2.13 CPU): a wrapper subclass with device "cuda" kills the
process as soon as an op takes a CUDA device guard, while plain CPU tensors run every kernel.
A TorchDispatchMode rewrites `device="cuda"` in factories, places the results of ops on
device tensors in the caching allocator's blocks (allocator.py), and lets a tensor subclass
that dispatches by itself (a nested jagged tensor) run the op on its inner tensors.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from torch.cuda import _gpu_trace
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

from csan_lint.runtime.cuda_semantics import CAPTURE_FORBIDDEN, copy_effect, to_copy_pins_result
from csan_lint.runtime.emulation import allocator, autograd_streams, current, machine, streams
from csan_lint.runtime.emulation.memory import DeviceMemory, Registry
from csan_lint.runtime.op_plans import HOST_SYNC, PLANS, OpPlan, plan_of

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
_aten = torch.ops.aten
_TensorBase = torch._C.TensorBase
_to_copy = _aten._to_copy.default


class _PinnedPool:
    """The caching host allocator behind `pin_memory()`: blocks of a power-of-two size, a
    freed one handed out again to a request of its size once no non-blocking copy that used it
    is pending (as CUDA's host allocator waits for the copy's event), kept until emptied.
    Each hand-out is a new storage on the block's bytes, which dies with its last tensor as a
    pinned storage does on CUDA (the sanitizer ends the block's state then). Threads pin
    memory while others copy: a lock makes handing out a block and the tensor taking it one
    step, so no two threads get the same free block."""

    def __init__(self) -> None:
        self.blocks: list[torch.UntypedStorage] = []
        self.users: dict[int, weakref.ref[torch.UntypedStorage]] = {}  # block's ptr -> its hand-out
        self.copies: dict[int, tuple[int, int]] = {}  # block's ptr -> (stream, its launch count)
        self.lock = threading.Lock()

    def new_tensor(self, like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of `like`'s shape and dtype in a block of the pool (bytes undefined)."""
        with self.lock:
            storage = self._allocate(like.nbytes)
            # torch's stubs lack the schema's default `stride=[]` (contiguous) of this overload.
            return torch.empty(0, dtype=like.dtype).set_(storage, 0, like.shape)  # type: ignore[call-overload]

    def _allocate(self, nbytes: int) -> torch.UntypedStorage:
        size = 1 << max(nbytes - 1, 0).bit_length()
        block = next((block for block in self.blocks if block.nbytes() == size and self._free(block)), None)
        if block is None:
            block = torch.UntypedStorage(size)
            self.blocks.append(block)
        ptr = block.data_ptr()
        storage = cast(torch.UntypedStorage, torch._C._construct_storage_from_data_pointer(ptr, CPU, size))
        storage.__dict__["_csan_block"] = block  # its bytes outlive the pool (after empty_cache)
        pinned.add(storage)
        self.users[ptr] = weakref.ref(storage)
        return storage

    def _free(self, block: torch.UntypedStorage) -> bool:
        ptr = block.data_ptr()
        user = self.users.get(ptr)
        if user is not None and user() is not None:
            return False  # a tensor still uses it
        copy = self.copies.get(ptr)
        return copy is None or not streams.pending(*copy)

    def copied(self, storage: torch.UntypedStorage) -> None:
        """A non-blocking copy on the current stream used pinned `storage`."""
        ptr = storage.data_ptr()
        with self.lock:
            user = self.users.get(ptr)
            if user is not None and user() is storage:
                handle = current.current_handle()
                self.copies[ptr] = (handle, streams.launched.get(handle, 0))

    def empty_cache(self) -> None:
        """`torch._C._host_emptyCache()`: give back the free blocks."""
        with self.lock:
            self.blocks = [block for block in self.blocks if not self._free(block)]


memory = DeviceMemory(allocator.DEFAULT_MEMORY)
pinned = Registry()
pinned_pool = _PinnedPool()
active = False


def reset() -> None:
    """Forget every device and pinned storage (leaving or entering the emulation); tensors
    of the old device die silently, with no free callback from a device that is gone. The
    device's memory size is read from `CSAN_LINT_DEVICE_MEMORY` (allocator.py)."""
    global memory, pinned, pinned_pool
    memory.registry.on_free = None
    memory = DeviceMemory(allocator.DEFAULT_MEMORY, machine.DEVICE_COUNT)
    set_memory_size(allocator.memory_size_from_environment())
    pinned = Registry()
    pinned_pool = _PinnedPool()


def set_memory_size(size: int) -> None:
    """Each device's memory from now on (a child process was activated before its settings)."""
    for device_allocator in memory.allocators:
        device_allocator.capacity = size
    machine.DeviceProperties.total_memory = size


def is_device(tensor: torch.Tensor) -> bool:
    """Whether `tensor` lives on the emulated device (hot path)."""
    try:
        return tensor.untyped_storage()._cdata in memory.registry.blocks
    except (RuntimeError, NotImplementedError, TypeError):
        return False  # no storage: sparse, nested, wrapper subclasses


def device_index(tensor: torch.Tensor) -> int:
    """The device a device tensor lives on."""
    return memory.registry.blocks[tensor.untyped_storage()._cdata].device


def _first_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """(the device of the first device tensor among the arguments, of another one: -1 if none)."""
    first = other = -1
    for value in (*args, *kwargs.values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, torch.Tensor) and is_device(item):
                index = device_index(item)
                if first < 0:
                    first = index
                elif index != first and other < 0:
                    other = index
    return first, other


def is_pinned_host(tensor: torch.Tensor) -> bool:
    try:
        return tensor.untyped_storage()._cdata in pinned.blocks
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _place_all(out: Any, copy: bool = True) -> None:
    if isinstance(out, torch.Tensor):
        memory.place((out,), copy)
    elif isinstance(out, (tuple, list)):
        memory.place((item for item in out if isinstance(item, torch.Tensor)), copy)


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
            streams.mark_done(current.current_handle())
    if effect.host_pending:
        pinned_pool.copied(host)


def sync_current() -> None:
    """A blocking copy between host and device: CUDA syncs the current stream (and traces it)."""
    handle = current.current_handle()
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


_DENSE_TYPES = (torch.Tensor, torch.nn.Parameter)


class _WrapperFound(Exception):
    """An argument is a tensor subclass that dispatches by itself (a nested jagged tensor)."""


def _scan(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, bool]:
    """(any device tensor, any host tensor with data dimensions) among the arguments; raises
    `_WrapperFound` for a wrapper subclass."""
    on_device = on_host = False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if type(value) not in _DENSE_TYPES and is_traceable_wrapper_subclass(value):
                raise _WrapperFound
            if is_device(value):
                on_device = True
            elif value.dim():
                on_host = True
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    if type(item) not in _DENSE_TYPES and is_traceable_wrapper_subclass(item):
                        raise _WrapperFound
                    if is_device(item):
                        on_device = True
                    elif item.dim():
                        on_host = True
    return on_device, on_host


def _names_wrapper(args: tuple[Any, ...]) -> bool:
    first = args[0] if args else None
    return isinstance(first, torch.Tensor) and type(first) not in _DENSE_TYPES and is_traceable_wrapper_subclass(first)


class _CudaRng:
    """Each device's own generator, as CUDA's default generator per device: seeded ops on device
    tensors draw from their device's (the op runs under it), so `torch.cuda.manual_seed`
    reproduces one device's randomness without touching the CPU's or another device's."""

    def __init__(self) -> None:
        self.generators: list[torch.Generator] = []
        self.lock = threading.Lock()

    def of(self, device: int) -> torch.Generator:
        """Device `device`'s generator (made on first use, with CUDA's default seed)."""
        generators = self.generators
        if device >= len(generators):
            with self.lock:  # threads may ask for a new device's at once
                while len(generators) <= device:
                    generators.append(torch.Generator())
        return generators[device]

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        host = torch.default_generator
        generator = self.of(current.current_index())
        with self.lock:
            saved = host.get_state()
            host.set_state(generator.get_state())
            try:
                return func(*args, **kwargs)
            finally:
                generator.set_state(host.get_state())
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
        if streams.deferred:
            streams.flush()
        device = kwargs.get("device")
        to_device = -1  # the device the op's results go to, when it names one
        if device is not None and _names_wrapper(args):
            return NotImplemented  # `device=` is for the subclass's inner tensors (see below)
        if device is not None:
            if device.type == "cuda":
                to_device = current.check_device(device)
                kwargs = {**kwargs, "device": CPU}
            elif kwargs.get("pin_memory"):
                kwargs = {**kwargs, "pin_memory": False}
                out = func(*args, **kwargs)
                _pin_all(out)
                return out
            elif special == _PLAIN and getattr(_host_named, "active", False):
                return func(*args, **kwargs)
        try:
            on_device, on_host = _scan(args, kwargs)
        except _WrapperFound:
            # The subclass's own dispatch runs the op on its inner tensors, which come back
            # here with the device named as the user named it.
            return NotImplemented
        if not on_device and to_device < 0:
            if special == _PLAIN:
                return func(*args, **kwargs)
            return _special(special, func, args, kwargs, False, -1)
        if machine.DEVICE_COUNT == 1:
            if on_host and plan.pointwise:
                _different_devices("cuda:0", "cpu")
            return _launch(plan, special, func, args, kwargs, on_device, to_device)
        # Several devices: the op runs under its tensors' device (c10's device guard); a copy
        # between devices runs on the source's.
        first, other = _first_device(args, kwargs) if on_device else (-1, -1)
        if on_host and plan.pointwise:
            _different_devices(f"cuda:{max(first, to_device)}", "cpu")
        if other >= 0 and plan.pointwise and special != _COPY_INTO:
            _different_devices(f"cuda:{first}", f"cuda:{other}")
        index = first if first >= 0 and special in (_COPY_TO, _COPY_INTO) else max(to_device, first)
        if special == _COPY_INTO and other >= 0:
            index = other  # copy_(destination, source): the source's device
        with current.on_device(index):
            return _launch(plan, special, func, args, kwargs, on_device, to_device)


def _different_devices(one: str, two: str) -> None:
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {one} and {two}!"
    )


def _launch(
    plan: OpPlan,
    special: int,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    on_device: bool,
    to_device: int,
) -> Any:
    """An op on device tensors, on the current device."""
    # As on CUDA, the host waits for the current stream after these (a traced sync).
    host_sync = on_device and plan.kind == HOST_SYNC and plan.syncs_host(args, kwargs)
    if streams.capturing:
        graph = streams.capturing.get(current.current_handle())
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
    to_device: int,
) -> Any:
    if special == _PLAIN:
        return run(func, plan, args, kwargs)
    return _special(special, func, args, kwargs, on_device, to_device)


# Ops whose results' bytes are undefined: placed on the device without a copy.
_EMPTY = frozenset(
    id(op)
    for op in (
        _aten.empty.memory_format,
        _aten.empty_strided.default,
        _aten.empty_like.default,
        _aten.new_empty.default,
        _aten.new_empty_strided.default,
    )
)
_HOST_OUT_OF_MEMORY = re.compile(
    r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to allocate (\d+) bytes"
)


def _host_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], seeded: bool = False) -> Any:
    """Run a device op's host kernel: device randomness, CUDA's out-of-memory error where the
    host has no memory for a result, and a resizable `out=` for a kernel that resizes it."""
    try:
        return rng.run(func, args, kwargs) if seeded else func(*args, **kwargs)
    except RuntimeError as error:
        text = str(error)
        found = _HOST_OUT_OF_MEMORY.search(text)
        if found is not None:
            memory.allocator.stats.num_ooms += 1
            raise torch.OutOfMemoryError(memory.allocator.out_of_memory_message(int(found.group(1)))) from None
        if "not resizable" not in text:
            raise
    # An `out=` tensor in an allocator block is resized by the kernel: CUDA's kernel would
    # allocate a new block; here it gets memory of its own (a new allocation) and runs again.
    written = _written(func, args, kwargs)
    for tensor in written:
        memory.unplace(tensor)
    out = func(*args, **kwargs)
    for tensor in written:
        memory.resized(tensor)
    return out


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The device tensors an op writes (its schema's mutable arguments)."""
    found = []
    for position, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        for tensor in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(tensor, torch.Tensor) and is_device(tensor):
                found.append(tensor)
    return found


def run(func: Any, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an op on device tensors: device randomness, results on the device."""
    out = _host_call(func, args, kwargs, plan.seeded)
    if plan.fresh:
        _place_all(out, copy=id(func) not in _EMPTY)
    return out


def _special(
    kind: int, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool, to_device: int
) -> Any:
    if kind == _COPY_TO:
        # _to_copy: to the device when asked (`device="cuda"`), to the host when the user
        # asked (`.cpu()`, `.to("cpu")`), else where the source is: torch's own code (a
        # backward formula) names the device it sees, the CPU, meaning "the same device".
        source_on_device = is_device(args[0])
        target_device = to_device >= 0 or (source_on_device and not getattr(_host_named, "active", False))
        non_blocking = kwargs.get("non_blocking", False)
        to_host = source_on_device and not target_device
        pin = kwargs.get("pin_memory") or to_copy_pins_result(to_host, non_blocking)
        if kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}
        out = _host_call(func, args, kwargs) if target_device else func(*args, **kwargs)
        if source_on_device and to_device >= 0 and device_index(args[0]) != to_device:
            with streams.between_devices(device_index(args[0]), to_device):
                _place_all(out)  # allocated on the destination's current stream
            autograd_streams.tag_move(args[0], 0)
        elif target_device:
            _place_all(out)
        elif pin:
            pinned.add(out.untyped_storage())
        if source_on_device != target_device:
            copied(to_host, (out if to_host else args[0]).untyped_storage(), non_blocking)
        return out
    if kind == _COPY_INTO:
        destination, source = args[0], args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if is_device(destination) and is_device(source) and device_index(destination) != device_index(source):
            with streams.between_devices(device_index(source), device_index(destination)):
                out = func(*args, **kwargs)
            autograd_streams.tag_move(source, 1)
            return out
        out = func(*args, **kwargs)
        to_host = is_device(source)
        if is_device(destination) != to_host:
            copied(to_host, (destination if to_host else source).untyped_storage(), non_blocking)
        return out
    if kind == _RESIZE:
        if on_device:
            _grow_for_resize(func, args)
        return func(*args, **kwargs)
    # _RECORD_STREAM: the caching allocator's bookkeeping (the block waits for the stream).
    if on_device:
        memory.record_stream(args[0], streams.key_of(args[1]))
        return None
    return func(*args, **kwargs)


def _grow_for_resize(func: Any, args: tuple[Any, ...]) -> None:
    """Before `resize_` / `resize_as_` of a device tensor past its storage: a new block."""
    tensor = args[0]
    shape = args[1] if func is _aten.resize_.default else args[1].shape
    numel = 1
    for size in shape:
        numel *= int(size)
    needed = (int(tensor.storage_offset()) + numel) * tensor.element_size()
    if needed > tensor.untyped_storage().nbytes():
        memory.grow(tensor, needed)
