"""Pinned host blocks a device copy used. The dispatch mode (mode.py) watches them: later CPU
ops on them are host accesses, which the engine checks against the copies still pending. A
block is new to the engine when first watched, and its engine state ends when its storage dies.
Apart from the mode because a block's life is the storage's, not any op's."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any

import torch

from csan_lint.runtime.engine_lock import EngineLock
from csan_lint.runtime.stacks import capture_stack
from csan_lint.runtime.tensor_bytes import byte_extent, storage_base


class HostBlocks:
    """The watched blocks, storage base -> weak ref to the storage (`by_base`, read on the mode's
    hot path). `tracker` hears of their starts, ends and accesses under `lock`; `on_error(exc)`
    of a failure at a block's death, which comes from a garbage collection, not from an op."""

    def __init__(self, tracker: Any, lock: EngineLock, on_error: Callable[[BaseException], None]) -> None:
        self.tracker = tracker
        self.lock = lock
        self.on_error = on_error
        self.by_base: dict[int, weakref.ref[torch.UntypedStorage]] = {}

    def watch(self, tensor: torch.Tensor) -> None:
        """A pinned host block a device copy uses: its later CPU ops are host accesses. It is a
        new block to the engine (what a dead block at its bytes left is forgotten: the host
        allocator reuses a block only once the copies using it are done), until it dies."""
        storage = tensor.untyped_storage()
        base = storage.data_ptr()
        known = self.by_base.get(base)
        if known is not None and known() is storage:
            return
        self.by_base[base] = weakref.ref(storage, partial(self._died, base))
        with self.lock:
            self.tracker.allocated(base, storage.nbytes(), None)

    def _died(self, base: int, ref: weakref.ref[torch.UntypedStorage]) -> None:
        """A host block's pending accesses end with it: a later block at its bytes starts clean."""
        if self.lock.inside():  # it died inside an engine call (a garbage collection there)
            self.lock.later(partial(self._died, base, ref))
            return
        if self.by_base.get(base) is not ref:
            return  # replaced (a device block took the address on the emulated device)
        del self.by_base[base]
        try:
            with self.lock:
                self.tracker.freed(base)
        except Exception as exc:  # a sanitizer bug must not break the user's program
            self.on_error(exc)

    def accessed(
        self, operator: str, host: Sequence[tuple[torch.Tensor, str, bool, bool]], stop: Collection[int]
    ) -> None:
        """CPU op `operator` touched the host tensors `host` ((tensor, argument, is_write,
        is_output)): those in watched blocks are host accesses; `stop` ends their stack walk."""
        stack = None
        for tensor, _, is_write, _ in host:
            base = storage_base(tensor)
            if base not in self.by_base:
                continue
            ptr, size = byte_extent(tensor)
            if size == 0:
                continue
            if stack is None:
                stack = capture_stack(stop=stop)
            with self.lock:
                self.tracker.host_accessed(ptr, size, is_write, operator, stack=stack)
