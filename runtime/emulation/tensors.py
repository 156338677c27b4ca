"""`torch.Tensor`, `torch.UntypedStorage` and factory attributes of the emulated device:
device tensors report their device (`cuda:k`) and `is_cuda`; `.to("cuda")`, `.cuda()`, `.cpu()`,
`torch.tensor(..., device="cuda")` move data across the (emulated) host/device boundary as
the `_to_copy` a CUDA build dispatches, so every mode on the stack sees that op; pinned
memory and `torch.Generator(device="cuda")` are emulated too. These patches are global, so
every thread and every other mode (a sanitizer's) sees the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.utils._device
from torch.utils._python_dispatch import _disable_current_modes

from csan_lint.runtime.emulation import current, generic, machine
from csan_lint.runtime.emulation import device as emulated
from csan_lint.runtime.emulation.device import CPU, CUDA, is_device, is_pinned_host, naming_host
from csan_lint.runtime.emulation.gaps import EmulationGap

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
_to_copy = torch.ops.aten._to_copy.default


def _on_device(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is on the device: its storage, or for a wrapper subclass (a nested
    jagged tensor), the device it was made with (its inner tensors')."""
    if is_device(tensor):
        return True
    return type(tensor) is not torch.Tensor and _device_get(tensor) == CUDA


_DEVICES = [torch.device("cuda", index) for index in range(machine.MAX_DEVICES)]


def _tensor_device(self: torch.Tensor) -> torch.device:
    if is_device(self):
        return _DEVICES[emulated.device_index(self)]
    return _device_get(self)


def _current() -> torch.device:
    """`torch.device("cuda", current device)`: what a bare "cuda" names."""
    return _DEVICES[current.current_index()]


def _tensor_is_cuda(self: torch.Tensor) -> bool:
    return is_device(self) or _is_cuda_get(self)


def _tensor_is_cpu(self: torch.Tensor) -> bool:
    return not is_device(self) and _is_cpu_get(self)


def _tensor_get_device(self: torch.Tensor) -> int:
    if is_device(self):
        return emulated.device_index(self)
    return _base_get_device(self)


def _move(
    tensor: torch.Tensor, device: torch.device, dtype: Any, non_blocking: bool, memory_format: Any
) -> torch.Tensor:
    """A copy across the host/device boundary, as `_to_copy` with the target device, so
    every mode on the stack sees the op a CUDA build dispatches."""
    kwargs: dict[str, Any] = {"device": device, "non_blocking": non_blocking}
    if dtype is not None:
        kwargs["dtype"] = dtype
    if memory_format is not None:
        kwargs["memory_format"] = memory_format
    if device.type == "cuda":
        return _to_copy(tensor, **kwargs)
    with naming_host():
        return _to_copy(tensor, **kwargs)


def _is_index(value: Any) -> bool:
    """A bare device index (`torch.device(0)`, `x.to(0)`), which names the accelerator."""
    return isinstance(value, int) and not isinstance(value, bool)


_base_parse_to = torch._C._nn._parse_to


def parse_to(*args: Any, **kwargs: Any) -> Any:
    """`torch._C._nn._parse_to` (what `Tensor.to` parses its arguments with, and libraries such
    as tensordict call): a bare index (`to(0)`, `to(device=0)`) is the accelerator, as on a CUDA
    build; the CPU build's parser refuses it."""
    if _is_index(kwargs.get("device")):
        kwargs = {**kwargs, "device": torch.device("cuda", kwargs["device"])}
    if args and _is_index(args[0]):
        args = (torch.device("cuda", args[0]), *args[1:])
    return _base_parse_to(*args, **kwargs)


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
        if args and _is_index(args[0]):
            args = (torch.device("cuda", args[0]), *args[1:])
        copy = kwargs.get("copy", False)
        try:
            device, dtype, non_blocking, memory_format = parse_to(*args, **parse_kwargs)
        except RuntimeError:
            if not args:
                raise
            # `copy=True` given positionally: always the last positional argument.
            device, dtype, non_blocking, memory_format = parse_to(*args[:-1], **parse_kwargs)
            copy = True
    if device is None or device.type not in ("cuda", "cpu"):
        return _base_to(self, *args, **kwargs)
    source_on_device = _on_device(self)
    if device.type == "cuda":
        index = current.check_device(device)
        if source_on_device and is_device(self) and emulated.device_index(self) != index:
            return _move(self, _DEVICES[index], dtype, non_blocking, memory_format)  # to another device
    if (device.type == "cuda") != source_on_device:
        return _move(self, device, dtype, non_blocking, memory_format)
    # No move: what is left (dtype, copy, layout) happens where the tensor is.
    rest_kwargs: dict[str, Any] = {"non_blocking": non_blocking, "copy": copy}
    if memory_format is not None:
        rest_kwargs["memory_format"] = memory_format
    if dtype is not None:
        return _base_to(self, dtype, **rest_kwargs)
    return _base_to(self, self.dtype, **rest_kwargs)


_base_tensor_new = _TensorBase.__new__


def _tensor_new(*args: Any, **kwargs: Any) -> Any:
    """`torch.Tensor.__new__(cls, ...)`: a subclass made from a tensor (`super().__new__(cls, t)`,
    as tensordict's MemoryMappedTensor does) aliases it in C++; dispatched through a mode, the
    alias would come back with a Python object of its own, which the subclass's cannot replace.
    (Taking `*args` alone keeps torch._dynamo's check of this function's signature content.)"""
    if len(args) == 2 and not kwargs and isinstance(args[1], torch.Tensor) and args[0] is not torch.Tensor:
        with _disable_current_modes():
            return _base_tensor_new(*args)
    return _base_tensor_new(*args, **kwargs)


def _tensor_cuda(
    self: torch.Tensor, device: Any = None, non_blocking: bool = False, memory_format: Any = torch.preserve_format
) -> torch.Tensor:
    target = _DEVICES[current.check_device(device)]
    return _tensor_to(self, target, non_blocking=non_blocking, memory_format=memory_format)


def _tensor_cpu(self: torch.Tensor, memory_format: Any = torch.preserve_format) -> torch.Tensor:
    if _on_device(self):
        return _move(self, CPU, None, False, memory_format)
    return _base_to(self, CPU, memory_format=memory_format)


def _tensor_pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    if is_device(self):
        raise RuntimeError("cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned")
    if is_pinned_host(self):
        return self
    # From the host allocator's pool (a freed block comes back), laid out contiguously.
    return emulated.pinned_pool.new_tensor(self).copy_(self)


def _tensor_is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    if is_pinned_host(self):
        return True
    # host memory registered through cudart().cudaHostRegister
    return bool(generic.cudart.registered) and generic.cudart.covers(self.data_ptr(), self.nbytes)


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
        return _move(out, _current(), None, non_blocking, None)
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
        if kwargs.get("pin_memory") and (target is None or target.type == "cpu"):
            return _pinned(base(data, *args, **{**kwargs, "pin_memory": False}))
        if target is None or target.type != "cuda":
            return base(data, *args, device=device, **kwargs)
        index = current.check_device(target)
        requires_grad = kwargs.pop("requires_grad", False)
        out = _move(base(data, *args, **kwargs), _DEVICES[index], None, False, None)
        return out.requires_grad_() if requires_grad else out

    factory.__name__ = base.__name__
    factory.__doc__ = base.__doc__
    return factory


def _names_host(device: Any, args: tuple[Any, ...]) -> bool:
    """Whether a factory call makes a host tensor: `device="cpu"`, or no device and (for a
    `*_like` or `new_*` call) a host tensor as its model."""
    if device is not None:
        return not _is_index(device) and torch.device(device).type == "cpu"
    model = args[0] if args and isinstance(args[0], torch.Tensor) else None
    return model is None or not _on_device(model)


def _pinned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in pinned memory from the host allocator, keeping `requires_grad`."""
    out = _tensor_pin_memory(tensor.detach())
    return out.requires_grad_() if tensor.requires_grad else out


def _device_named(base: Any) -> Any:
    """A factory with a `device=` argument as the user names it: a bare index (`zeros(2,
    device=0)`) is the accelerator, as on a CUDA build (the CPU build's argument parser refuses
    it before any mode sees the call); `zeros_like(x, device="cpu")`, `x.new_zeros(n,
    device="cpu")` are host tensors even when `x` is on the device."""

    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.get("device")
        if kwargs.get("pin_memory") and _names_host(device, args):
            with naming_host():
                return _pinned(base(*args, **{**kwargs, "pin_memory": False}))
        if device is None:
            return base(*args, **kwargs)
        if _is_index(device):
            kwargs["device"] = torch.device("cuda", device)
        elif torch.device(device).type == "cpu":
            with naming_host():
                return base(*args, **kwargs)
        return base(*args, **kwargs)

    call.__name__ = base.__name__
    call.__doc__ = base.__doc__
    return call


_FACTORIES = (
    "empty", "empty_strided", "zeros", "ones", "full", "rand", "randn", "randint", "randperm",
    "arange", "linspace", "logspace", "eye", "scalar_tensor", "tril_indices", "triu_indices",
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
)  # fmt: skip
_SPARSE_FACTORIES = (
    "sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor",
    "sparse_compressed_tensor",
)  # fmt: skip
_NEW_FACTORIES = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full")


def device_constructors() -> Callable[[], frozenset[Any]]:
    """What torch's device context (`with torch.device(d):`, `set_default_device`) asks for the
    factories whose device it fills in. It matches by identity the function it intercepts, which
    is torch's own (the wrappers above call it), so it must go on knowing torch's own rather than
    the wrappers `torch.zeros` names while the device is on. Call before patching."""
    known = frozenset(torch.utils._device._device_constructors.__wrapped__())
    return lambda: known


_device_tensor = _factory(_base_tensor)


def _tensor_new_tensor(self: torch.Tensor, data: Any, *, device: Any = None, **kwargs: Any) -> torch.Tensor:
    # The C++ `new_tensor` takes the device it sees, the CPU; the device's own is wanted.
    target = _tensor_device(self) if device is None and is_device(self) else device
    if target is not None and torch.device(target).type == "cuda":
        kwargs.setdefault("dtype", self.dtype)
        return _device_tensor(data, device=target, **kwargs)
    return _TensorBase.new_tensor(self, data, device=device, **kwargs)


# Generator's metaclass is torch's own, private one, so it is taken from the class; mypy cannot
# follow a base computed by `type(...)`.
class _GeneratorType(type(torch._C.Generator)):  # type: ignore[misc]
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch._C.Generator)


class Generator(torch._C.Generator, metaclass=_GeneratorType):
    """`torch.Generator(device="cuda")`: a CPU generator (device ops run on the CPU) that
    reports the device; every generator still passes `isinstance(g, torch.Generator)`."""

    index: int
    """The device it reports (`cuda` alone: the current device, as CUDA's)."""

    def __new__(cls, device: Any = None) -> Any:
        target = CPU if device is None else torch.device(device)
        if target.type != "cuda":
            return torch._C.Generator(target)
        generator = super().__new__(cls)
        generator.index = current.check_device(target)
        return generator

    # torch's stubs declare `device` a plain attribute; at runtime it is a read-only property too.
    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return _DEVICES[self.index]


_base_device = torch.device


class _DeviceType(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _base_device)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _base_device)


class Device(metaclass=_DeviceType):
    """`torch.device(0)`: a bare index names the accelerator, which a CPU build lacks (torch
    raises); here it is the emulated CUDA device. Makes torch's own device objects, so they
    pickle, compare and script as usual, and each passes `isinstance(d, torch.device)`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if args and _is_index(args[0]):
            args = ("cuda", *args)
        return _base_device(*args, **kwargs)


Device.__module__, Device.__qualname__, Device.__name__ = "torch", "device", "device"


_storage_device_get = torch._C.StorageBase.__dict__["device"].__get__
_base_storage_to = torch.UntypedStorage.to
_base_storage_new = torch._C.StorageBase.__new__


def _storage_on_device(storage: torch.UntypedStorage) -> bool:
    return storage._cdata in emulated.memory.registry.blocks


def _storage_device(self: torch.UntypedStorage) -> torch.device:
    entry = emulated.memory.registry.blocks.get(self._cdata)
    if entry is not None:
        return _DEVICES[entry.device]
    return _storage_device_get(self)


def _storage_to(self: torch.UntypedStorage, *, device: Any, non_blocking: bool = False) -> torch.UntypedStorage:
    """torch's `_to` (torch/_utils.py) on the emulated device: what `torch.load` restores a
    "cuda:k" storage with, and `storage.cuda(k)`. A storage already there is itself; else a new
    one on the target (device k's, on its current stream) gets the bytes by one `copy_`, which the
    device dispatches as the copy it is (host and device, or two devices)."""
    target = torch.device(device)
    if target.type not in ("cuda", "cpu"):
        return _base_storage_to(self, device=device, non_blocking=non_blocking)
    if target.type == "cuda":
        target = _DEVICES[current.check_device(target)]
    if _storage_device(self) == target:
        return self
    if target.type == "cpu":
        # As torch's `_to`: a non-blocking copy from the device lands in pinned memory.
        copy = torch.empty(self.nbytes(), dtype=torch.uint8, pin_memory=non_blocking).untyped_storage()
    else:
        with current.on_device(target.index):
            copy = emulated.memory.new_storage(self.nbytes())
    copy.copy_(self, non_blocking)
    return copy


def _storage_cuda(self: torch.UntypedStorage, device: Any = None, non_blocking: bool = False) -> torch.UntypedStorage:
    target = torch.device("cuda", current.check_device(device))
    return _storage_to(self, device=target, non_blocking=non_blocking)


def _storage_clone(self: torch.UntypedStorage) -> torch.UntypedStorage:
    # torch's clone builds `UntypedStorage(n, device=self.device)`, which the CPU build refuses.
    on_device = _storage_on_device(self)
    copy = emulated.memory.new_storage(self.nbytes()) if on_device else torch.UntypedStorage(self.nbytes())
    copy.copy_(self)
    return copy


def _storage_new(cls: type, *args: Any, device: Any = None, **kwargs: Any) -> torch.UntypedStorage:
    # `UntypedStorage(n, device="cuda")`, which `TypedStorage` and the legacy
    # `torch.cuda.IntStorage`-style types build on, and the CPU build refuses.
    if device is None or torch.device(device).type != "cuda":
        if device is not None:
            kwargs["device"] = device
        return cast(torch.UntypedStorage, _base_storage_new(cls, *args, **kwargs))
    current.check_device(device)
    host = cast(torch.UntypedStorage, _base_storage_new(cls, *args, **kwargs))
    storage = emulated.memory.new_storage(host.nbytes())
    if args and not isinstance(args[0], int):  # made from data: the bytes, else undefined
        storage.copy_(host)
    return storage


_base_storage_resize = torch.UntypedStorage.resize_


def _storage_resize(self: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
    if size != self.nbytes() and emulated.memory.is_block(self):
        # Its memory is the allocator's segment, not its own: a StorageImpl cannot be re-pointed.
        raise EmulationGap("resizing a device storage in place (`UntypedStorage.resize_`)")
    return cast(torch.UntypedStorage, _base_storage_resize(self, size))


def _sparse_factory(base: Any) -> Any:
    """A sparse factory: sparse tensors are not emulated on the device."""

    def factory(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        if device is not None and (_is_index(device) or torch.device(device).type == "cuda"):
            raise EmulationGap(f"sparse tensors on the device (`torch.{base.__name__}(..., device=...)`)")
        return base(*args, device=device, **kwargs)

    factory.__name__ = base.__name__
    factory.__doc__ = base.__doc__
    return factory


STORAGE_ATTRIBUTES: dict[str, Any] = {
    "resize_": _storage_resize,
    "__new__": _storage_new,
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
    "__new__": staticmethod(_tensor_new),
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
    **{name: _device_named(getattr(_TensorBase, name)) for name in _NEW_FACTORIES},
}
TORCH_FUNCTIONS: dict[str, Any] = {
    "tensor": _device_tensor,
    "as_tensor": _factory(_base_as_tensor),
    "Generator": Generator,
    "device": Device,
    **{name: _device_named(getattr(torch, name)) for name in _FACTORIES},
    **{name: _sparse_factory(getattr(torch, name)) for name in _SPARSE_FACTORIES},
}


def script_builtins() -> dict[int, str]:
    """TorchScript's builtin table entries (by function id) of the replaced factories: it
    compiles a call of one as its aten op, as it does torch's own (it cannot compile Python
    with `*args`). Scripted code runs those ops on the host, not on the emulated device."""
    return {
        id(value): f"aten::{name}" for name, value in TORCH_FUNCTIONS.items() if name not in ("Generator", "device")
    }
