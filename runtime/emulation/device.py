"""Device tensors of the emulated CUDA device: plain CPU tensors whose storage is registered
as device memory, reporting `cuda:0` through patched `torch.Tensor` attributes.

Why this shape (checked on torch 2.13 CPU): a wrapper subclass with device "cuda" kills the
process as soon as an op takes a CUDA device guard, while plain CPU tensors run every kernel.
The registry is keyed by storage, so views share their base's device, and a weak reference
on the storage's (preserved) Python object tells when the last tensor using it dies: that is
the allocator's free. A TorchDispatchMode rewrites `device="cuda"` in factories, marks the
results of ops on device tensors, and fires the allocator's trace callbacks; the `torch.Tensor`
patches are global, so every thread and every other mode (a sanitizer's) sees the same answer.
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

from csan_lint.runtime.emulation import streams

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
_aten = torch.ops.aten
_TensorBase = torch._C.TensorBase
_device_get = _TensorBase.__dict__["device"].__get__
_is_cuda_get = _TensorBase.__dict__["is_cuda"].__get__
_is_cpu_get = _TensorBase.__dict__["is_cpu"].__get__
_base_to = _TensorBase.to
_base_tolist = _TensorBase.tolist
_base_get_device = _TensorBase.get_device
_base_type = _TensorBase.type
_base_tensor = torch.tensor
_base_as_tensor = torch.as_tensor
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


memory = _Memory()
pinned = _Registry()
active = False


def reset() -> None:
    """Forget every device and pinned storage (leaving or entering the emulation); tensors
    of the old device die silently, with no free callback from a device that is gone."""
    global memory, pinned
    memory.registry.on_free = None
    memory = _Memory()
    pinned = _Registry()


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


def _sync_current() -> None:
    """A blocking copy between host and device: CUDA syncs the current stream (and traces it)."""
    handle = streams.current_handle()
    streams.forbid_during_capture(handle)
    _gpu_trace.StreamSynchronizationCallbacks.fire_callbacks(handle)


# -- per-op plans ---------------------------------------------------------------------------

_PLAIN, _COPY_TO, _COPY_INTO, _SCALAR, _RECORD_STREAM, _RESIZE = range(6)


class _Plan:
    """What one op overload needs from the emulation, computed once."""

    __slots__ = ("kind", "fresh", "pointwise", "seeded", "writes")

    def __init__(self, func: Any) -> None:
        schema = func._schema
        self.kind = {
            _to_copy: _COPY_TO,
            _aten.copy_.default: _COPY_INTO,
            _aten._local_scalar_dense.default: _SCALAR,
            _aten.record_stream.default: _RECORD_STREAM,
            _aten.resize_.default: _RESIZE,
            _aten.resize_as_.default: _RESIZE,
        }.get(func, _PLAIN)
        # Only results that alias no input are new allocations.
        self.fresh = all(ret.alias_info is None for ret in schema.returns)
        self.pointwise = torch.Tag.pointwise in func.tags
        self.seeded = torch.Tag.nondeterministic_seeded in func.tags
        # For ops that write their inputs and return them (in place, out=): which argument
        # each result is, so a graph capture can defer the write to replay.
        self.writes: tuple[tuple[int, str], ...] | None = None
        returns = schema.returns
        if returns and all(ret.alias_info is not None and ret.alias_info.is_write for ret in returns):
            written = []
            for ret in returns:
                for position, argument in enumerate(schema.arguments):
                    alias = argument.alias_info
                    if alias is not None and alias.before_set == ret.alias_info.before_set:
                        written.append((position, argument.name))
                        break
            if len(written) == len(returns):
                self.writes = tuple(written)


_plans: dict[Any, _Plan] = {}
# Set while a call in which the user named the host (`.cpu()`, `zeros_like(x, device="cpu")`)
# is dispatched: torch's own C++ names the CPU too, meaning "the same device" (see `_special`).
_host_named = threading.local()


@contextmanager
def _naming_host() -> Iterator[None]:
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


# -- torch.cuda memory statistics and random state ---------------------------------------------


def memory_allocated(device: Any = None) -> int:
    streams.check_device(device)
    return memory.allocated


def max_memory_allocated(device: Any = None) -> int:
    streams.check_device(device)
    return memory.peak


def reset_peak_memory_stats(device: Any = None) -> None:
    streams.check_device(device)
    memory.peak = memory.allocated


def memory_stats(device: Any = None) -> dict[str, int]:
    """The caching allocator's counters that tests read (bytes of live device tensors)."""
    streams.check_device(device)
    stats = {}
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[f"{kind}.all.current"] = memory.allocated
        stats[f"{kind}.all.peak"] = memory.peak
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
    return total - memory.allocated, total


def manual_seed(seed: int) -> None:
    rng.generator.manual_seed(int(seed))


def seed() -> None:
    rng.generator.seed()


def initial_seed() -> int:
    return rng.generator.initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    streams.check_device(device)
    return rng.generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    streams.check_device(device)
    rng.generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [rng.generator.get_state()]


def set_rng_state_all(new_states: Any) -> None:
    for state in new_states:
        rng.generator.set_state(state)


class DeviceMode(TorchDispatchMode):
    """Runs ops on the CPU while keeping device tensors on the device."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._disable_dynamo: ~3 us per op.
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if not active:
            return func(*args, **kwargs)  # a thread that outlived the emulation
        plan = _plans.get(func)
        if plan is None:
            plan = _plans[func] = _Plan(func)
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
            elif plan.kind == _PLAIN and getattr(_host_named, "active", False):
                return func(*args, **kwargs)
        on_device, on_host = _scan(args, kwargs)
        if not (on_device or to_device):
            if plan.kind == _PLAIN:
                return func(*args, **kwargs)
            return _special(plan.kind, func, args, kwargs, False, False)
        if on_host and plan.pointwise:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                "devices, cuda:0 and cpu!"
            )
        if streams.capturing:
            graph = streams.capturing.get(streams.current_handle())
            # Allocator bookkeeping (record_stream, resize_) happens at once, even in a capture.
            if graph is not None and plan.kind not in (_RECORD_STREAM, _RESIZE):
                if plan.kind == _SCALAR:
                    raise RuntimeError(streams.CAPTURE_FORBIDDEN)
                return graph.record(
                    func, plan, args, kwargs, lambda: _execute(plan, func, args, kwargs, on_device, to_device)
                )
        return _execute(plan, func, args, kwargs, on_device, to_device)


def _execute(plan: _Plan, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool, to_device: bool) -> Any:
    if plan.kind == _PLAIN:
        return run(func, plan, args, kwargs)
    return _special(plan.kind, func, args, kwargs, on_device, to_device)


def run(func: Any, plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an op on device tensors: device randomness, results on the device."""
    out = rng.run(func, args, kwargs) if plan.seeded else func(*args, **kwargs)
    if plan.fresh:
        _mark_all(out)
    return out


def _special(kind: int, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], on_device: bool, to_device: bool) -> Any:
    if kind == _COPY_TO:
        # _to_copy: to the device when asked (`device="cuda"`), to the host when the user
        # asked (`.cpu()`, `.to("cpu")`), else where the source is: torch's own code (a
        # backward formula) names the device it sees, the CPU, meaning "the same device".
        source_on_device = is_device(args[0])
        target_device = to_device or (source_on_device and not getattr(_host_named, "active", False))
        non_blocking = kwargs.get("non_blocking", False)
        # A non-blocking device-to-host copy lands in pinned memory (the CUDA `_to_copy`).
        pin = kwargs.get("pin_memory") or (source_on_device and not target_device and non_blocking)
        if kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}
        out = func(*args, **kwargs)
        if target_device:
            memory.mark(out)
        elif pin:
            pinned.add(out.untyped_storage())
        if source_on_device != target_device and not non_blocking:
            _sync_current()
        return out
    if kind == _COPY_INTO:
        destination, source = args[0], args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        out = func(*args, **kwargs)
        if is_device(destination) != is_device(source) and not non_blocking:
            _sync_current()
        return out
    if kind == _SCALAR:
        if on_device:
            streams.forbid_during_capture(streams.current_handle())
            out = func(*args, **kwargs)
            _sync_current()
            return out
        return func(*args, **kwargs)
    if kind == _RESIZE:
        out = func(*args, **kwargs)
        if on_device:
            memory.resized(args[0])
        return out
    # _RECORD_STREAM: bookkeeping of the caching allocator; nothing to do on the CPU.
    if on_device:
        return None
    return func(*args, **kwargs)


# -- torch.Tensor attributes ------------------------------------------------------------------


def _tensor_device(self: torch.Tensor) -> torch.device:
    if is_device(self):
        return CUDA
    return _device_get(self)


def _tensor_is_cuda(self: torch.Tensor) -> bool:
    return is_device(self) or _is_cuda_get(self)


def _tensor_is_cpu(self: torch.Tensor) -> bool:
    return not is_device(self) and _is_cpu_get(self)


def _tensor_get_device(self: torch.Tensor) -> int:
    if is_device(self):
        return 0
    return _base_get_device(self)


def _move(tensor: torch.Tensor, device: torch.device, dtype: Any, non_blocking: bool, memory_format: Any) -> torch.Tensor:
    """A copy across the host/device boundary, as `_to_copy` with the target device, so
    every mode on the stack sees the op a CUDA build dispatches."""
    kwargs: dict[str, Any] = {"device": device, "non_blocking": non_blocking}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if memory_format is not None:
        kwargs["memory_format"] = memory_format
    if device.type == "cuda":
        return _to_copy(tensor, **kwargs)
    with _naming_host():
        return _to_copy(tensor, **kwargs)


def _tensor_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor):
        other, rest = args[0], args[1:]
        device, dtype = other.device, other.dtype
        non_blocking = rest[0] if rest else kwargs.get("non_blocking", False)
        copy = rest[1] if len(rest) > 1 else kwargs.get("copy", False)
        memory_format = kwargs.get("memory_format")
    else:
        # `_parse_to` knows every form of `to` but refuses `copy=True`.
        parse_kwargs = {name: value for name, value in kwargs.items() if name != "copy"}
        copy = kwargs.get("copy", False)
        try:
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **parse_kwargs)
        except RuntimeError:
            if not args:
                raise
            # `copy=True` given positionally: always the last positional argument.
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args[:-1], **parse_kwargs)
            copy = True
    if device is None or device.type not in ("cuda", "cpu"):
        return _base_to(self, *args, **kwargs)
    if device.type == "cuda":
        streams.check_device(device)
    source_on_device = is_device(self)
    if (device.type == "cuda") != source_on_device:
        return _move(self, device, dtype, non_blocking, memory_format)
    # No move: what is left (dtype, copy, layout) happens where the tensor is.
    rest_kwargs: dict[str, Any] = {"non_blocking": non_blocking, "copy": copy}
    if memory_format is not None:
        rest_kwargs["memory_format"] = memory_format
    if dtype is not None:
        return _base_to(self, dtype, **rest_kwargs)
    return _base_to(self, self.dtype, **rest_kwargs)


def _tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, memory_format: Any = torch.preserve_format) -> torch.Tensor:
    target = CUDA if device is None else torch.device("cuda", streams.check_device(device))
    return _tensor_to(self, target, non_blocking=non_blocking, memory_format=memory_format)


def _tensor_cpu(self: torch.Tensor, memory_format: Any = torch.preserve_format) -> torch.Tensor:
    if is_device(self):
        return _move(self, CPU, None, False, memory_format)
    return _base_to(self, CPU, memory_format=memory_format)


def _tensor_pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    if is_device(self):
        raise RuntimeError("cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned")
    if is_pinned_host(self):
        return self
    out = self.clone()
    pinned.add(out.untyped_storage())
    return out


def _tensor_is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return is_pinned_host(self)


def _tensor_tolist(self: torch.Tensor) -> Any:
    # The CUDA build copies to the host first (a blocking copy: a stream sync).
    if is_device(self):
        return _base_tolist(_tensor_cpu(self))
    return _base_tolist(self)


def _tensor_numpy(self: torch.Tensor, *, force: bool = False) -> Any:
    if is_device(self):
        raise TypeError(
            "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first."
        )
    return _TensorBase.numpy(self, force=force)


def _tensor_type(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    if dtype is None:
        name = _base_type(self)
        return name.replace("torch.", "torch.cuda.", 1) if is_device(self) else name
    if not isinstance(dtype, str):
        return _base_type(self, dtype, non_blocking, **kwargs)
    to_device = dtype.startswith("torch.cuda.")
    if to_device:
        dtype = "torch." + dtype[len("torch.cuda.") :]
    out = _base_type(self, dtype, non_blocking, **kwargs)
    if to_device and not is_device(out):
        return _move(out, CUDA, None, non_blocking, None)
    if not to_device and is_device(out):
        return _move(out, CPU, None, non_blocking, None)
    return out


def _factory(base: Any) -> Any:
    """`torch.tensor` / `torch.as_tensor` with a device: built on the host, then moved by a
    blocking `_to_copy` to the device, the op the CUDA build dispatches for them."""

    def factory(data: Any, *args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        target = None if device is None else torch.device(device)
        if base is _base_as_tensor and isinstance(data, torch.Tensor):
            # No copy unless the device (or dtype) differs.
            if target is None:
                return base(data, *args, **kwargs)
            return _tensor_to(data, target, *args, **kwargs)
        if target is None or target.type != "cuda":
            return base(data, *args, device=device, **kwargs)
        streams.check_device(target)
        requires_grad = kwargs.pop("requires_grad", False)
        out = _move(base(data, *args, **kwargs), CUDA, None, False, None)
        return out.requires_grad_() if requires_grad else out

    factory.__name__ = base.__name__
    factory.__doc__ = base.__doc__
    return factory


def _host_when_named(base: Any) -> Any:
    """`zeros_like(x, device="cpu")`, `x.new_zeros(n, device="cpu")`: the user named the
    host, so the result is a host tensor even when `x` is on the device."""

    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if device is None or torch.device(device).type != "cpu":
            return base(*args, **kwargs)
        with _naming_host():
            return base(*args, **kwargs)

    call.__name__ = base.__name__
    call.__doc__ = base.__doc__
    return call


_LIKE_FACTORIES = ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like")
_NEW_FACTORIES = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full")

_device_tensor = _factory(_base_tensor)


def _tensor_new_tensor(self: torch.Tensor, data: Any, *, device: Any = None, **kwargs: Any) -> torch.Tensor:
    # The C++ `new_tensor` takes the device it sees, the CPU; the device's own is wanted.
    target = CUDA if device is None and is_device(self) else device
    if target is not None and torch.device(target).type == "cuda":
        kwargs.setdefault("dtype", self.dtype)
        return _device_tensor(data, device=target, **kwargs)
    return _TensorBase.new_tensor(self, data, device=device, **kwargs)


# torch's Generator has a metaclass of its own (OpaqueBaseMeta) that ours must derive from; mypy
# cannot follow a computed base class: [misc].
class _GeneratorType(type(torch._C.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch._C.Generator)


class Generator(torch._C.Generator, metaclass=_GeneratorType):
    """`torch.Generator(device="cuda")`: a CPU generator (device ops run on the CPU) that
    reports the device; every generator still passes `isinstance(g, torch.Generator)`."""

    def __new__(cls, device: Any = None) -> Any:
        target = CPU if device is None else torch.device(device)
        if target.type != "cuda":
            return torch._C.Generator(target)
        streams.check_device(target)
        return super().__new__(cls)

    @property
    def device(self) -> torch.device:  # type: ignore[override]  # torch declares a plain attribute
        return CUDA


_storage_device_get = torch._C.StorageBase.__dict__["device"].__get__
_base_storage_to = torch.UntypedStorage.to


def _storage_on_device(storage: torch.UntypedStorage) -> bool:
    return storage._cdata in memory.registry.blocks


def _storage_device(self: torch.UntypedStorage) -> torch.device:
    if _storage_on_device(self):
        return CUDA
    return _storage_device_get(self)


def _storage_to(self: torch.UntypedStorage, *, device: Any, non_blocking: bool = False) -> torch.UntypedStorage:
    # What `torch.load` restores a "cuda:0" storage with (and `storage.cuda()`).
    target = torch.device(device)
    if target.type not in ("cuda", "cpu"):
        return _base_storage_to(self, device=device, non_blocking=non_blocking)
    on_device = _storage_on_device(self)
    if (target.type == "cuda") == on_device:
        if on_device:
            streams.check_device(target)
        return self
    copy = torch.UntypedStorage(self.nbytes())
    copy.copy_(self)
    if target.type == "cuda":
        streams.check_device(target)
        memory.mark_storage(copy)
    if not non_blocking:
        _sync_current()
    return copy


def _storage_cuda(self: torch.UntypedStorage, device: Any = None, non_blocking: bool = False) -> torch.UntypedStorage:
    target = torch.device("cuda", streams.check_device(device))
    return _storage_to(self, device=target, non_blocking=non_blocking)


def _storage_clone(self: torch.UntypedStorage) -> torch.UntypedStorage:
    # torch's clone builds `UntypedStorage(n, device=self.device)`, which the CPU build refuses.
    copy = torch.UntypedStorage(self.nbytes())
    copy.copy_(self)
    if _storage_on_device(self):
        memory.mark_storage(copy)
    return copy


STORAGE_ATTRIBUTES: dict[str, Any] = {
    "device": property(_storage_device),
    "clone": _storage_clone,
    "to": _storage_to,
    "cuda": _storage_cuda,
}

_autocast = torch.amp.autocast_mode.autocast
_base_autocast_enter = _autocast.__enter__
_base_autocast_exit = _autocast.__exit__


def _autocast_enter(self: Any) -> Any:
    # Device tensors are CPU tensors to the dispatcher, so CUDA autocast alone would cast
    # nothing: the same policy is applied on the CPU for the block.
    out = _base_autocast_enter(self)
    if self.device == "cuda":
        host = _autocast("cpu", dtype=self.fast_dtype, enabled=self._enabled, cache_enabled=self._cache_enabled)
        self.__dict__.setdefault("_emulated_host", []).append(host)
        host.__enter__()
    return out


def _autocast_exit(self: Any, *exc: Any) -> Any:
    hosts = self.__dict__.get("_emulated_host")
    if hosts:
        hosts.pop().__exit__(*exc)
    return _base_autocast_exit(self, *exc)


AUTOCAST_ATTRIBUTES: dict[str, Any] = {"__enter__": _autocast_enter, "__exit__": _autocast_exit}

TENSOR_ATTRIBUTES: dict[str, Any] = {
    "device": property(_tensor_device),
    "is_cuda": property(_tensor_is_cuda),
    "is_cpu": property(_tensor_is_cpu),
    "get_device": _tensor_get_device,
    "to": _tensor_to,
    "cuda": _tensor_cuda,
    "cpu": _tensor_cpu,
    "pin_memory": _tensor_pin_memory,
    "is_pinned": _tensor_is_pinned,
    "tolist": _tensor_tolist,
    "numpy": _tensor_numpy,
    "type": _tensor_type,
    "new_tensor": _tensor_new_tensor,
    **{name: _host_when_named(getattr(_TensorBase, name)) for name in _NEW_FACTORIES},
}
TORCH_FUNCTIONS: dict[str, Any] = {
    "tensor": _device_tensor,
    "as_tensor": _factory(_base_as_tensor),
    "Generator": Generator,
    **{name: _host_when_named(getattr(torch, name)) for name in _LIKE_FACTORIES},
}
