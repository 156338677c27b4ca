"""Backward ops on the stream their forward op ran on, with the syncs CUDA's autograd engine
inserts, so side-stream training code gets the verdicts it gets on a GPU.

Forward: autograd makes an op's node just before the op reaches the device's dispatch mode,
so the node holds the thread's last autograd sequence number; the emulation tags that number
with the current stream. Backward: while a node runs, its tag's stream is the current stream
(as the engine's stream guard makes it; the node's hooks see it too; a node with no
tag, such as a leaf's AccumulateGrad, stays on the stream of the node run before it); when
the stream changes from one node to the next, the new stream first waits for the previous one
(in a chain, the producer of its gradient); when `backward()`/`grad()` returns, the caller's
stream waits for every stream the pass used.

Limits: sequence numbers are per thread, so a graph built across threads can mix tags; a node
fed by several branches waits for the one run just before it only; tags of nodes that never
run backward are dropped oldest first past `MAX_TAGS`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from csan_lint.runtime.emulation import streams
from csan_lint.runtime.emulation.device import is_device

MAX_TAGS = 1 << 16

_next_sequence_nr = torch._C._autograd._get_sequence_nr
_current_node = torch._C._current_autograd_node
_tags: dict[int, int] = {}  # node sequence number -> stream handle its forward op ran on
_local = threading.local()  # .passes: the backward passes running in this thread, innermost last


class _Pass:
    """One backward pass: the caller's stream, the node running and its stream, what it used."""

    __slots__ = ("ambient", "node", "stream", "used")

    def __init__(self, ambient: int) -> None:
        self.ambient = ambient
        self.node = -1
        self.stream = ambient
        self.used: set[int] = set()


def reset() -> None:
    _tags.clear()
    _local.__dict__.clear()


def tag_forward() -> None:
    """An op on device tensors ran: the node autograd just made for it (if any) runs its
    backward on the current stream."""
    node = _next_sequence_nr() - 1
    if node >= 0 and node not in _tags:
        if len(_tags) >= MAX_TAGS:
            for old in list(_tags)[: MAX_TAGS // 2]:
                del _tags[old]
        _tags[node] = streams.current_handle()


def op_stream() -> int:
    """The stream an op issued now runs on: the current one, which a backward pass sets to each
    node's stream as the node starts (here for a node no pre-hook of ours announced)."""
    if not _tags:
        return streams.current_handle()
    node = _current_node()
    if node is not None:
        _enter(node, ())
    return streams.current_handle()


def _running() -> _Pass:
    passes = getattr(_local, "passes", None)
    if not passes:
        passes = _local.passes = [_Pass(streams.current_handle())]  # a pass we did not see start
    return passes[-1]


def _enter(node: Any, grads: tuple[Any, ...]) -> None:
    """`node` starts: its stream becomes current (the engine's stream guard, which its hooks
    see), after waiting for the stream of the node before it, which produced `grads` (they
    are `record_stream`ed for the new stream, as the engine's input buffers do); the nodes it
    feeds get the same pre-hook."""
    running = _running()
    sequence_nr = node._sequence_nr()
    if sequence_nr == running.node:
        return
    stream = _tags.get(sequence_nr, running.stream)
    if stream != running.stream:
        _wait(stream, running.stream)
        streams.select(stream)
        target = streams.Stream(stream_id=stream)
        for grad in grads:
            if isinstance(grad, torch.Tensor) and is_device(grad):
                grad.record_stream(target)
    running.node, running.stream = sequence_nr, stream
    running.used.add(stream)
    for following, _ in node.next_functions:
        if following is not None:
            _hook(following)


def _hook(node: Any) -> None:
    """Announce `node`'s start to `_enter`, once per node."""
    metadata = node.metadata  # a dict autograd keeps per node for Python code
    if metadata.get("csan_hooked"):
        return
    metadata["csan_hooked"] = True
    node.register_prehook(lambda grads: _enter(node, grads))


def _wait(waiting: int, on: int) -> None:
    streams.Stream(stream_id=waiting).wait_stream(streams.Stream(stream_id=on))


def joined(entry: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.autograd.backward` / `grad` whose caller's stream waits, on return, for every
    stream the pass ran ops on."""

    def run_pass(*args: Any, **kwargs: Any) -> Any:
        passes = getattr(_local, "passes", None)
        if passes is None:
            passes = _local.passes = []
        running = _Pass(streams.current_handle())
        passes.append(running)
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs", ()))
        for root in (roots,) if isinstance(roots, torch.Tensor) else roots:
            if isinstance(root, torch.Tensor) and root.grad_fn is not None:
                _hook(root.grad_fn)
        try:
            return entry(*args, **kwargs)
        finally:
            passes.remove(running)
            streams.select(running.ambient)
            for stream in running.used - {running.ambient}:
                _wait(running.ambient, stream)

    run_pass.__name__ = entry.__name__
    run_pass.__doc__ = entry.__doc__
    return run_pass
