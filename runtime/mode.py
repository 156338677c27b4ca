"""The TorchDispatchMode that turns every op on device tensors into a kernel launch for the
tracker: which bytes it reads and writes (from the schema's alias info and each tensor's
storage offset, sizes and strides), on which stream, from which user line.

It also maps the ops whose meaning is not "a kernel on the current stream" to the events
they stand for, as cuda_semantics.py states them: copies between the device and the host
(which sync the host, which leave their host side pending), `.item()`-like host syncs, and
CPU ops touching pinned memory that a device copy used (host accesses).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from sys import _getframe
from threading import get_ident
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from csan_lint.runtime.cuda_semantics import copy_effect
from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.events import Access
from csan_lint.runtime.extents import Layout, is_approximated, pattern
from csan_lint.runtime.forward_stacks import ForwardStacks
from csan_lint.runtime.host_blocks import HostBlocks
from csan_lint.runtime.op_plans import ALLOCATE, COPY, HOST_SYNC, PLANS, RESULT, SKIP, OpPlan, plan_of
from csan_lint.runtime.stacks import Stack, capture_stack
from csan_lint.runtime.tensor_bytes import byte_extent
from csan_lint.runtime.unwrap import has_storage_less, unwrap_call

_Tensor = torch.Tensor  # a global name, not an attribute lookup on the module, per tensor per op
_new_access = tuple.__new__


def _strided_key(tensor: torch.Tensor) -> tuple[int, int, Layout | None]:
    """(ptr, size, layout) of the bytes a non-empty, non-contiguous tensor touches: its extent,
    and its layout, which the engine compares exactly (extents.py), unless the extent is exact."""
    ptr, size = byte_extent(tensor)
    strides = tuple(tensor.stride())
    if min(strides, default=0) < 0:
        return ptr, size, None  # not a torch layout: the extent is safe
    layout = (tensor.element_size(), tuple(tensor.shape), strides)
    if pattern(ptr, layout) is None and not is_approximated(ptr, layout):
        return ptr, size, None  # dense (a transpose, a broadcast): the same key as its contiguous base
    return ptr, size, layout


def _merge(
    accesses: dict[tuple[int, int, Layout | None], Access],
    key: tuple[int, int, Layout | None],
    name: str,
    is_write: bool,
    is_output: bool,
) -> None:
    """Add one argument's bytes; the same bytes under several arguments (`add(a, a)`,
    `mul(x, 5, out=x)`) are one access naming them all."""
    known = accesses.get(key)
    if known is None:
        accesses[key] = Access(key[0], key[1], is_write, name, is_output, key[2])
        return
    argument = known.argument
    if name != RESULT and name not in argument.split(", "):
        argument = f"{argument}, {name}"
    accesses[key] = Access(key[0], key[1], known.is_write or is_write, argument, known.is_output or is_output, key[2])


class SanitizerMode(TorchDispatchMode):
    """Reports each op on device tensors to `tracker` as a kernel launch.

    `is_device(t)` says whether a tensor lives on the (real or emulated) CUDA device,
    `is_pinned(t)` whether a host tensor is pinned, `current_stream()` the current stream's
    handle; the sanitizer picks them for the device in use. `on_internal_error(exc)` receives
    any failure of this bookkeeping, which never reaches the user's code.
    """

    def __init__(
        self,
        tracker: Any,
        *,
        is_device: Callable[[torch.Tensor], bool],
        is_pinned: Callable[[torch.Tensor], bool],
        current_stream: Callable[[], int],
        on_internal_error: Callable[[BaseException], None],
        errors: Sequence[Any] = (),
        on_errors: Callable[[], None] | None = None,
        on_skipped: Callable[[str], None] | None = None,
        lock: EngineLock | None = None,
        device_stream: Callable[[torch.Tensor], int] | None = None,
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.is_device = is_device
        self.is_pinned = is_pinned
        self.current_stream = current_stream
        # Several devices: the stream an op runs on is its tensors' device's current stream.
        self.device_stream = device_stream
        self.on_internal_error = on_internal_error
        # The tracker's error list, watched after each launch: `on_errors` hears of new ones
        # at once (the pytest plugin streams them, so a crash loses none).
        self.errors = errors
        self.errors_seen = 0
        self.on_errors = on_errors
        # Tensor types with no storage the sanitizer could not see into, each told once to
        # `on_skipped(type name)`; their ops are not checked, every other op still is.
        self.skipped_types: set[str] = set()
        self.on_skipped = on_skipped
        # Threads share the tracker; the mode, the trace callbacks and the wrappers take turns.
        self.lock = lock if lock is not None else EngineLock()
        self.checking = True
        # Ids of the code objects where stack walks end: the frames outside a test runner's
        # call into the user's code are never the user's (see capture_stack).
        self.stack_stop: set[int] = set()
        # Allocations announced by the allocator callback (ptr -> (stream, stack)) whose size
        # is learnt when an op first shows their storage.
        self.pending: dict[int, Any] = {}
        # Host blocks a device copy used: later CPU ops on them are host accesses.
        self._host = HostBlocks(tracker, self.lock, self._stop)
        self.host_blocks = self._host.by_base  # read on the hot path
        # Accesses of the kernels captured into the running CUDA graph: they run at replay,
        # not now (None: no capture running).
        self.capture: list[Access] | None = None
        self.capture_thread = 0  # the thread that began it
        # Per thread (autograd runs backward on threads of its own on a GPU), while an op runs:
        # .caller, the frame that called it, where its stack walk starts, and .stack, that
        # walk once an allocator callback made it.
        self._local = threading.local()
        # A backward op run where no user frame is (autograd's device threads) is reported at
        # its forward op's line.
        self._forward_stacks = ForwardStacks()
        # Facts from runs (runtime/facts_mode.py's FactsHook): told of each op's calling frame
        # and of copies; None unless asked for.
        self.facts: Any = None

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch would wrap __torch_dispatch__ in torch._disable_dynamo: ~3 us per op for nothing.
        return False

    def __torch_dispatch__(
        self, func: OpOverload, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if kwargs is None:
            kwargs = {}
        plan = PLANS.get(id(func))
        if plan is None:
            try:
                plan = plan_of(func)
            except Exception as exc:
                if self.checking:
                    self._stop(exc)
                return func(*args, **kwargs)
        if not self.checking or plan.kind == SKIP:
            return plan.call(*args, **kwargs)
        # An allocation the op makes walks the stack from the op's caller; its launch reuses that walk.
        local = self._local
        local.caller, local.stack = _getframe(1), None
        if self.facts is not None:
            self.facts.before_op(local.caller)
        try:
            out = plan.call(*args, **kwargs)
        finally:
            stack, local.stack, local.caller = local.stack, None, None
        try:
            if types:  # a tensor subclass (wrapper, nested, fake): check what it is made of
                self._observe_unwrapped(plan, args, kwargs, out, stack)
            else:
                self._observe(plan, args, kwargs, out, stack)
        except Exception as exc:
            error = exc
            if has_storage_less(args, kwargs):  # sparse: a plain type, found when it fails
                try:
                    self._observe_unwrapped(plan, args, kwargs, out, stack)
                    return out
                except Exception as again:
                    error = again
            self._stop(error)
        return out

    def _observe_unwrapped(
        self, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, stack: Stack | None
    ) -> None:
        args, kwargs, out, skipped = unwrap_call(args, kwargs, out)
        for name in skipped - self.skipped_types:
            self.skipped_types.add(name)
            if self.on_skipped is not None:
                self.on_skipped(name)
        self._observe(plan, args, kwargs, out, stack)

    def stack_of_running_op(self) -> Stack:
        """For the allocator's callbacks: inside an op, the op's stack (from its caller out),
        walked once for all it allocates and frees and for its launch (a walk costs more than
        the rest of an op's bookkeeping); outside one, the callback's own."""
        local = self._local
        shared = getattr(local, "stack", None)
        if shared is not None:
            return shared
        caller = getattr(local, "caller", None)
        if caller is None:
            return capture_stack(skip=1, stop=self.stack_stop)  # no op of ours is running in this thread
        op_stack = local.stack = capture_stack(start=caller, stop=self.stack_stop)
        return op_stack

    def _observe(
        self, plan: OpPlan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, stack: Stack | None
    ) -> None:
        device: dict[tuple[int, int, Layout | None], Access] = {}
        # (tensor, argument name, is_write, is_output) of the host tensors, for copies and
        # host accesses (made on the first one: most ops have none); `seen` keeps device
        # tensors while allocations wait for their size.
        host: list[tuple[torch.Tensor, str, bool, bool]] | None = None
        seen: list[torch.Tensor] | None = [] if self.pending else None
        first: torch.Tensor | None = None  # the first device tensor: its device runs the op
        is_device = self.is_device
        nargs = len(args)
        single = plan.single_return
        for position, name, is_write, is_output, is_result in plan.slots:
            if is_result:
                value = out if single else out[position]
            else:
                value = args[position] if position < nargs else kwargs.get(name)
            # One tensor is the common case: no tuple around it, no inner loop.
            for tensor in (value,) if isinstance(value, _Tensor) else value if isinstance(value, (list, tuple)) else ():
                if not isinstance(tensor, _Tensor):
                    continue  # None, or a number where the schema allows a wrapped scalar
                if not is_device(tensor):
                    if host is None:
                        host = []
                    host.append((tensor, name, is_write, is_output))
                    continue
                nbytes = tensor.nbytes
                if not nbytes:
                    continue  # an empty tensor touches no memory
                if first is None:
                    first = tensor
                key = (tensor.data_ptr(), nbytes, None) if tensor.is_contiguous() else _strided_key(tensor)
                if key in device:
                    _merge(device, key, name, is_write, is_output)
                else:
                    # Access(ptr, size, is_write, argument, is_output, layout) without the
                    # Python-level NamedTuple constructor: half the cost, and this runs per tensor per op.
                    device[key] = _new_access(Access, (key[0], key[1], is_write, name, is_output, key[2]))
                if seen is not None:
                    seen.append(tensor)
        if not device:
            if host and self.host_blocks:
                self._host_access(plan.operator, host)
            return
        if plan.kind == ALLOCATE:
            if seen:
                with self.lock:
                    self._resolve_pending(seen)
                if len(self.errors) != self.errors_seen:  # the allocation reused a freed block in use
                    self._new_errors()
            return
        assert first is not None  # set with device's first entry
        if self.device_stream is None:
            stream = self.current_stream()
        else:
            source = args[1] if plan.kind == COPY and nargs > 1 else None
            # c10 copies between devices on the source's device: copy_(destination, source).
            on = source if isinstance(source, torch.Tensor) and self.is_device(source) else first
            stream = self.device_stream(on)
        host_sync = plan.kind == HOST_SYNC and plan.syncs_host(args, kwargs)
        if plan.kind == COPY and host:
            position = plan.non_blocking_position
            non_blocking = bool(args[position] if position < nargs else kwargs.get("non_blocking", False))
            # Pinned or not only matters to a non-blocking copy (both blocking rows are alike):
            # is_pinned() is asked only then.
            to_host = any(entry[2] for entry in host)
            if self.facts is not None:
                self.facts.copied(to_host, non_blocking)
            effect = copy_effect(
                to_host=to_host,
                pinned=non_blocking and all(self.is_pinned(entry[0]) for entry in host),
                non_blocking=non_blocking,
            )
            if effect.host_pending:
                # The copy runs on the stream while the host goes on: its host side stays
                # pending until a sync.
                for tensor, name, is_write, is_output in host:
                    self._host.watch(tensor)
                    _merge(device, (*byte_extent(tensor), None), name, is_write, is_output)
            host_sync = effect.host_syncs
        accesses = list(device.values())
        outside_capture = False
        if self.capture is not None:
            if torch.cuda.is_current_stream_capturing():
                # The tracker checks the capture's fork/join structure; the memory is touched
                # when the graph is replayed.
                self.capture.extend(accesses)
                accesses = []
            else:
                outside_capture = get_ident() != self.capture_thread
        if stack is None:  # from the frame that called the op: this one and __torch_dispatch__ are never the user's
            stack = capture_stack(skip=2, stop=self.stack_stop)
        stack = self._forward_stacks.attributed(stack)
        # acquire/release, not `with`: the context manager protocol costs twice as much.
        lock = self.lock
        lock.acquire()
        try:
            if seen:
                self._resolve_pending(seen)
            if outside_capture:
                self.tracker.kernel_launched(stream, plan.operator, accesses, stack, outside_capture=True)
            else:
                self.tracker.kernel_launched(stream, plan.operator, accesses, stack)
            if host_sync:
                self.tracker.stream_synchronized(stream)
        finally:
            lock.release()
        if len(self.errors) != self.errors_seen:
            self._new_errors()

    def _resolve_pending(self, tensors: list[torch.Tensor]) -> None:
        """Allocations first seen now: their size is their storage's."""
        pending = self.pending
        for tensor in tensors:
            storage = tensor.untyped_storage()
            base = storage.data_ptr()  # storage_base(tensor), from the one storage object
            allocation = pending.pop(base, None)
            if allocation is not None:
                stream, stack = allocation
                self.tracker.allocated(base, storage.nbytes(), stream, stack=stack)
                # On the emulated device a dead pinned block's address can become a device
                # block's: the allocation replaced the host state, which must not be freed later.
                self.host_blocks.pop(base, None)

    def __exit__(self, *exc: Any) -> Any:
        # Host blocks are watched while the mode is on: their deaths after it are no event.
        self.host_blocks.clear()
        return super().__exit__(*exc)

    def _host_access(self, operator: str, host: Sequence[tuple[torch.Tensor, str, bool, bool]]) -> None:
        self._host.accessed(operator, host, self.stack_stop)
        if len(self.errors) != self.errors_seen:
            self._new_errors()

    def _new_errors(self) -> None:
        self.errors_seen = len(self.errors)
        if self.on_errors is not None:
            self.on_errors()

    def host_read(self, tensor: torch.Tensor, operator: str) -> None:
        """A host read that does not go through the dispatcher (`.tolist()`, `.numpy()`)."""
        if not self.checking or not self.host_blocks:
            return
        try:
            if not self.is_device(tensor):
                self._host_access(operator, [(tensor, "self", False, False)])
        except Exception as exc:
            self._stop(exc)

    def _stop(self, exc: BaseException) -> None:
        """A sanitizer bug must not break the user's program: checking stops, and the sanitizer
        hears why."""
        self.checking = False
        self.on_internal_error(exc)
