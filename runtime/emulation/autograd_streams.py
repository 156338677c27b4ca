"""Backward ops on the stream their forward op ran on, with the syncs CUDA's autograd engine
inserts, so side-stream training code gets the verdicts it gets on a GPU.

Forward: autograd makes an op's node just before the op reaches the device's dispatch mode,
so the node holds the thread's last autograd sequence number; the emulation tags that number
with the current stream. Backward: while a node runs, its tag's stream is the current stream
(as the engine's stream guard makes it; the node's hooks see it too). A leaf's AccumulateGrad
has no tag: it runs on the stream of the leaf's first use, the node of lowest sequence number
that feeds it (found when the pass starts); another untagged node stays on the stream of the
node run before it. When the stream changes from one node to the next, the new stream first
waits for the previous one. When a node returns, each device gradient it hands a node on
another stream is recorded on that stream, which waits for this one, and the engine's
accumulation of several branches' gradients runs there (CUDA's InputBuffer::add). When
`backward()`/`grad()` returns, the caller's stream waits for every stream the pass used. The
node of a copy between devices hands its source's gradient back on the source's device (a copy
between devices again), as CUDA's does, so a leaf's gradient accumulates on the leaf's device.

Limits: sequence numbers are per thread, so a graph built across threads can mix tags; a node
whose gradients go to nodes on two other streams accumulates on its own; a leaf's first use
is looked for in the graph being run only; tags of nodes that never run backward are dropped
oldest first past `MAX_TAGS`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from csan_lint.runtime.devices import stream_key
from csan_lint.runtime.emulation import current, streams
from csan_lint.runtime.emulation.device import device_index, is_device

MAX_TAGS = 1 << 16
FIRST_USE = "csan_first_use"
"""The key of a leaf's AccumulateGrad metadata that holds the stream of the leaf's first use."""

_next_sequence_nr = torch._C._autograd._get_sequence_nr
_current_node = torch._C._current_autograd_node
_tags: dict[int, int] = {}  # node sequence number -> stream handle its forward op ran on
# Node sequence number of a copy between devices -> (index of the source's gradient, the
# source's device): on a CPU build the node's formula, `grad.to(source.options())`, names the
# CPU and leaves the gradient where it is; CUDA's moves it back to the source's device.
_moves: dict[int, tuple[int, int]] = {}
_local = threading.local()  # .passes: the backward passes running in this thread, innermost last


class _Pass:
    """One backward pass: the caller's stream, the node running and its stream, what it used,
    and the consumer's stream a node's return left current for the accumulation (-1: none)."""

    __slots__ = ("accumulating_on", "ambient", "node", "stream", "used")

    def __init__(self, ambient: int) -> None:
        self.ambient = ambient
        self.node = -1
        self.stream = ambient
        self.used: set[int] = set()
        self.accumulating_on = -1


def reset() -> None:
    _tags.clear()
    _moves.clear()
    _local.__dict__.clear()


def tag_forward() -> None:
    """An op on device tensors ran: the node autograd just made for it (if any) runs its
    backward on the current stream."""
    node = _next_sequence_nr() - 1
    if node >= 0 and node not in _tags:
        if len(_tags) >= MAX_TAGS:
            for old in list(_tags)[: MAX_TAGS // 2]:
                del _tags[old]
        _tags[node] = current.current_handle()


def tag_move(source: torch.Tensor, gradient_index: int) -> None:
    """A copy between devices of `source` ran: the node autograd just made for it (if any) hands
    back its gradient (input `gradient_index`) on `source`'s device."""
    if source.requires_grad and torch.is_grad_enabled():
        node = _next_sequence_nr() - 1
        if len(_moves) >= MAX_TAGS:
            for old in list(_moves)[: MAX_TAGS // 2]:
                del _moves[old]
        _moves[node] = (gradient_index, device_index(source))


def op_stream() -> int:
    """The stream an op issued now runs on: the current one, which a backward pass sets to each
    node's stream as the node starts (here for a node no pre-hook of ours announced)."""
    if not _tags:
        return current.current_handle()
    node = _current_node()
    if node is not None:
        _enter(node, ())
    return current.current_handle()


def _running() -> _Pass:
    passes = getattr(_local, "passes", None)
    if not passes:
        passes = _local.passes = [_Pass(current.current_handle())]  # a pass we did not see start
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
    stream = _stream_of(node, running.stream)
    if stream != running.stream:
        _wait(stream, running.stream)
        streams.select(stream)
        target = streams.Stream(stream_id=stream)
        for grad in grads:
            if isinstance(grad, torch.Tensor) and is_device(grad):
                grad.record_stream(target)
    elif current.current_handle() == running.accumulating_on:
        streams.select(stream)  # back from the accumulation (a hook's own stream is left alone)
    running.node, running.stream, running.accumulating_on = sequence_nr, stream, -1
    running.used.add(stream)
    for following, _ in node.next_functions:
        if following is not None:
            _hook(following)


def _stream_of(node: Any, otherwise: int) -> int:
    stream = _tags.get(node._sequence_nr())
    return stream if stream is not None else node.metadata.get(FIRST_USE, otherwise)


def _produced(node: Any, grads: tuple[Any, ...]) -> None:
    """`node` returned `grads` for its next nodes: as CUDA's InputBuffer::add, a device gradient
    for a node on another stream is recorded on that stream, which waits for this one, and the
    accumulation into that node's input runs there."""
    running = _running()
    producer = running.stream
    consumers: set[int] = set()
    for grad, (following, _) in zip(grads, node.next_functions, strict=False):
        if following is None or not isinstance(grad, torch.Tensor) or not is_device(grad):
            continue
        consumer = _stream_of(following, producer)
        if consumer != producer:
            if consumer not in consumers:
                _wait(consumer, producer)
                consumers.add(consumer)
                running.used.add(consumer)  # joined back into the caller's stream at the end
            grad.record_stream(streams.Stream(stream_id=consumer))
    if len(consumers) == 1:
        running.accumulating_on = consumers.pop()
        streams.select(running.accumulating_on)


def _hook(node: Any) -> None:
    """Announce `node`'s start to `_enter` and its return to `_produced`, once per node."""
    metadata = node.metadata  # a dict autograd keeps per node for Python code
    if metadata.get("csan_hooked"):
        return
    metadata["csan_hooked"] = True
    node.register_prehook(_entering)
    node.register_hook(_returning)


# The hooks ask autograd for the node they run for rather than closing over it: a node holding
# a hook that holds the node is a reference cycle, which would keep every graph (and its saved
# device tensors, so their frees) alive until the garbage collector runs.
def _entering(grads: tuple[Any, ...]) -> None:
    _enter(torch._C._current_autograd_node(), grads)


def _returning(grads: tuple[Any, ...], _outputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
    node = torch._C._current_autograd_node()
    move = _moves.pop(node._sequence_nr(), None)
    if move is not None:
        index, device = move
        grad = grads[index] if index < len(grads) else None
        if isinstance(grad, torch.Tensor) and is_device(grad) and device_index(grad) != device:
            grads = (*grads[:index], grad.to(f"cuda:{device}"), *grads[index + 1 :])  # a copy between devices
        else:
            move = None
    _produced(node, grads)
    return grads if move is not None else None


def _find_first_uses(roots: list[Any]) -> None:
    """Give each leaf's AccumulateGrad in the graph the stream of the leaf's first use: that of
    the tagged node of lowest sequence number feeding it (autograd made the accumulator then)."""
    first: dict[int, tuple[int, Any, int]] = {}  # id -> (sequence number, accumulator, stream)
    seen: dict[int, Any] = {}  # id -> node, kept alive so that ids stay unique
    pending = list(roots)
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        sequence_nr = node._sequence_nr()
        stream = _tags.get(sequence_nr)
        for following, _ in node.next_functions:
            if following is None:
                continue
            if stream is not None and hasattr(following, "variable"):
                known = first.get(id(following))
                if known is None or sequence_nr < known[0]:
                    first[id(following)] = (sequence_nr, following, stream)
            pending.append(following)
    for _, accumulator, stream in first.values():
        accumulator.metadata[FIRST_USE] = stream


def _wait(waiting: int, on: int) -> None:
    streams.view(waiting).wait_stream(streams.view(on))


def joined(entry: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.autograd.backward` / `grad` whose caller's stream waits, on return, for every
    stream the pass ran ops on."""

    def run_pass(*args: Any, **kwargs: Any) -> Any:
        passes = getattr(_local, "passes", None)
        if passes is None:
            passes = _local.passes = []
        caller, callers = current.current_handle(), current.current_streams()
        roots = args[0] if args else kwargs.get("tensors", kwargs.get("outputs", ()))
        roots = [
            root for root in ((roots,) if isinstance(roots, torch.Tensor) else roots) if isinstance(root, torch.Tensor)
        ]
        nodes = [root.grad_fn for root in roots if root.grad_fn is not None]
        # The root gradients are made on the caller's current stream of the roots' device.
        device = next((device_index(root) for root in roots if is_device(root)), None)
        running = _Pass(caller if device is None else current.current_key(device))
        passes.append(running)
        for node in nodes:
            _hook(node)
        if _tags:
            _find_first_uses(nodes)
        try:
            return entry(*args, **kwargs)
        finally:
            passes.remove(running)
            for stream in (*callers.values(), caller):  # each device's current stream as it was
                streams.select(stream)
            for stream in running.used - set(callers.values()):
                # the caller's current stream on the stream's device waits for it
                owner = streams.device_of(stream)
                _wait(callers.get(owner, stream_key(current.DEFAULT_STREAM, owner)), stream)

    run_pass.__name__ = entry.__name__
    run_pass.__doc__ = entry.__doc__
    return run_pass
