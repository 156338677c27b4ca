"""The stream API, one table: every spelling of it, and the one typed operation it performs.

Spellings reach an entry three ways:
- a dotted callable (`FUNCTIONS`): its `torch.cuda` name, which every other spelling is first
  brought to (`SPELLING_MODULES`, `SPELLING_NAMES`: `torch.Stream`, `torch.accelerator.*`,
  `torch.cuda.streams.*`; an accelerator object's methods, `Function.accelerator`), or a project's
  own wrapper, by the setting that declares it (`SETTINGS`);
- a method on a stream, an event, a graph or a tensor (`METHODS`), by its name: which object
  the receiver is cannot be read statically, so a name means one operation whatever receives it;
- `with s:` on a stream, which enters it as `torch.cuda.stream(s)` does (lint/recognize.py).

lint/names.py resolves a dotted name to its `torch.cuda` name; the interpreters, the choice of
what they walk (lint/analysis/uses.py), the text prefilter (lint/shell/files.py), `--confirm`'s
recognizer (lint/recognize.py) and the settings (lint/shell/config.py) ask this table what that name,
or a method's, does; and what an identifier alone says where nothing binds it (a receiver named
like a stream or an event, an object named like a device handle: `names_a_stream`..., asked
through the module's `ImportTable` under the assumption `kinds-from-names`). No other
module names an API method. Pure data: no libcst, no torch.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class Kind(enum.Enum):
    """What an operation does to streams, events, graphs, memory or the host."""

    LAUNCH = "launch"
    """Work queued on the current stream (a collective writing its first argument in place)."""
    WAIT = "wait"
    """A stream waits (on the GPU) for another stream's work so far, or for an event."""
    RECORD = "record"
    """An event captures a stream's work so far."""
    HOST_SYNC = "host sync"
    """The host waits: for the device, a stream, an event, or the current stream (a host read)."""
    QUERY = "query"
    """The host asks whether work is done, without waiting."""
    COPY = "copy"
    ALLOC = "alloc"
    """Memory from the current stream's pool, no kernel launched."""
    FREE = "free"
    """Memory given back to its stream's pool now (`storage.resize_(0)`)."""
    RECORD_STREAM = "record_stream"
    """The allocator is told a block is in use on another stream."""
    CAPTURE = "capture"
    """A `with` block captured into a CUDA graph (begin at entry, end at exit)."""
    CAPTURE_BEGIN = "capture begin"
    CAPTURE_END = "capture end"
    REPLAY = "replay"
    GRAPH_CREATE = "graph create"
    GRAPHED_CALLABLES = "graphed callables"
    """Callables captured once and replayed on each call."""
    STREAM_CREATE = "stream create"
    EVENT_CREATE = "event create"
    CURRENT_STREAM = "current stream"
    DEFAULT_STREAM = "default stream"
    ENTER_STREAM = "enter stream"
    """A context that makes its stream current for the block it guards, and restores the old one."""
    SET_STREAM = "set stream"
    """Makes a stream current until another is set."""
    BACKWARD = "backward"
    """Autograd runs the backward pass: every leaf's `.grad` is written on the current stream."""
    AUTOGRAD_FUNCTION = "autograd function"
    """A base class whose subclasses' `backward` autograd calls, after `ctx`, with the
    gradients of their outputs written on the stream current where the backward pass runs."""
    ADDRESS = "address"
    """A tensor's memory handed out by its address (`data_ptr()`): code given it may read and
    write the memory later, on whichever stream it is told (`STREAM_HANDLE`)."""
    REGISTER_HOOK = "register hook"
    """A callable registered for autograd or a module to call later, with tensors written on the
    stream current where it is called: the gradient, the parameter it accumulated into, a
    module's inputs and outputs."""


class On(enum.Enum):
    """What a wait waits for, a host sync or a query is about, or a record records."""

    DEVICE = "device"
    STREAM = "stream"
    EVENT = "event"
    RECEIVER = "receiver"
    """The stream or the event the method is called on (`synchronize`, `query`)."""
    CURRENT = "current"
    """The current stream: a host read of a device tensor, a barrier."""


class Direction(enum.Enum):
    TO_DEVICE = "to device"
    TO_HOST = "to host"
    TO_PINNED = "to pinned host memory"
    EITHER = "either"
    """Decided by an argument (`to(device)`, `copy_(src)`)."""


class Receiver(enum.Enum):
    """The object a method is called on."""

    STREAM = "stream"
    EVENT = "event"
    STREAM_OR_EVENT = "stream or event"
    GRAPH = "graph"
    TENSOR = "tensor"
    STORAGE = "storage"
    MODULE = "module"


@dataclass(frozen=True)
class Operation:
    kind: Kind
    on: On | None = None
    direction: Direction | None = None
    """COPY: where the data goes."""
    blocking: bool | None = None
    """COPY: True if it always blocks the host; None if a `non_blocking` argument decides."""
    in_place: bool = False
    """COPY, LAUNCH: writes its receiver (`copy_`) or its first argument (a collective)."""


@dataclass(frozen=True)
class Function:
    """A callable reached by a dotted name."""

    name: str
    """Its canonical name: every other spelling of it resolves to this one (lint/names.py)."""
    op: Operation
    accelerator: str | None = None
    """The method of an accelerator object (DeepSpeed's `get_accelerator()`,
    `torch.get_device_module()`) that calls it; None if those objects have none."""
    marks_stream_code: bool = True
    """Code that mentions it is stream code (`--confirm`'s recognizer, the text prefilter)."""


@dataclass(frozen=True)
class Method:
    """A method of a stream, an event, a graph, a tensor or a storage."""

    name: str
    receiver: Receiver
    op: Operation
    shared: bool = False
    """Other common objects have a method of this name (`record`, `wait`, `to`)."""
    marks_stream_code: bool = False
    """A call of it is stream code (`--confirm`'s recognizer); of a `shared` name, only on a
    receiver named like a stream or an event."""


WAIT_STREAM = Operation(Kind.WAIT, On.STREAM)
WAIT_EVENT = Operation(Kind.WAIT, On.EVENT)
RECORD = Operation(Kind.RECORD, On.EVENT)
HOST_READ = Operation(Kind.HOST_SYNC, On.CURRENT)
"""Reading a device tensor on the host waits for the current stream."""
SYNC_RECEIVER = Operation(Kind.HOST_SYNC, On.RECEIVER)
QUERY_RECEIVER = Operation(Kind.QUERY, On.RECEIVER)
RECORD_STREAM = Operation(Kind.RECORD_STREAM, On.STREAM)
FREE = Operation(Kind.FREE)
ADDRESS = Operation(Kind.ADDRESS)
LAUNCH_ON_HANDLE = Operation(Kind.LAUNCH, On.STREAM)
"""Work launched on a stream given by its raw handle (`STREAM_HANDLE`)."""
COPY_EITHER = Operation(Kind.COPY, direction=Direction.EITHER)
"""`t.to(...)`: a copy whose direction its arguments decide."""
COPY_INTO = Operation(Kind.COPY, direction=Direction.EITHER, in_place=True)
"""`dst.copy_(src)`: a copy into the receiver."""
PIN = Operation(Kind.COPY, direction=Direction.TO_PINNED, blocking=True)

_CUDA = "torch.cuda"
_COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
    "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "recv", "irecv", "scatter",
)  # fmt: skip
"""torch.distributed's collectives that write their first argument in place, in order with the current stream."""

FUNCTIONS: tuple[Function, ...] = (
    Function(f"{_CUDA}.Stream", Operation(Kind.STREAM_CREATE), "Stream"),
    Function(f"{_CUDA}.ExternalStream", Operation(Kind.STREAM_CREATE), "ExternalStream"),
    Function(f"{_CUDA}.current_stream", Operation(Kind.CURRENT_STREAM), "current_stream"),
    Function(f"{_CUDA}.default_stream", Operation(Kind.DEFAULT_STREAM), "default_stream"),
    Function(f"{_CUDA}.stream", Operation(Kind.ENTER_STREAM), "stream"),
    Function(f"{_CUDA}.StreamContext", Operation(Kind.ENTER_STREAM), "StreamContext"),
    Function(f"{_CUDA}.set_stream", Operation(Kind.SET_STREAM), "set_stream"),
    Function(f"{_CUDA}.Event", Operation(Kind.EVENT_CREATE), "Event"),
    Function(f"{_CUDA}.synchronize", Operation(Kind.HOST_SYNC, On.DEVICE), "synchronize", marks_stream_code=False),
    Function(f"{_CUDA}.graph", Operation(Kind.CAPTURE), "capture_to_graph"),
    Function(f"{_CUDA}.CUDAGraph", Operation(Kind.GRAPH_CREATE), "create_graph"),
    Function(f"{_CUDA}.make_graphed_callables", Operation(Kind.GRAPHED_CALLABLES)),
    *(
        Function(name, HOST_READ, marks_stream_code=False)
        for name in ("torch.distributed.barrier", "deepspeed.comm.barrier")
    ),  # NCCL's barrier synchronizes the current stream with the host; DeepSpeed's calls torch's
    *(
        Function(f"torch.distributed.{name}", Operation(Kind.LAUNCH, in_place=True), marks_stream_code=False)
        for name in _COLLECTIVES
    ),
    Function("torch.autograd.backward", Operation(Kind.BACKWARD), marks_stream_code=False),
    *(
        Function(name, Operation(Kind.AUTOGRAD_FUNCTION), marks_stream_code=False)
        for name in ("torch.autograd.Function", "torch.autograd.function.Function")
    ),
    *(
        Function(f"torch.{name}", Operation(Kind.ALLOC), marks_stream_code=False)
        for name in ("empty", "empty_like", "empty_strided")
    ),
)
"""Callables, by canonical name."""

METHODS: tuple[Method, ...] = (
    Method("wait_stream", Receiver.STREAM, WAIT_STREAM, marks_stream_code=True),
    Method("wait_event", Receiver.STREAM, WAIT_EVENT, marks_stream_code=True),
    Method("record_event", Receiver.STREAM, RECORD, marks_stream_code=True),
    Method("record", Receiver.EVENT, RECORD, shared=True, marks_stream_code=True),
    Method("wait", Receiver.EVENT, WAIT_EVENT, shared=True, marks_stream_code=True),
    Method("query", Receiver.STREAM_OR_EVENT, QUERY_RECEIVER, shared=True, marks_stream_code=True),
    Method("synchronize", Receiver.STREAM_OR_EVENT, SYNC_RECEIVER, shared=True, marks_stream_code=True),
    Method("elapsed_time", Receiver.EVENT, Operation(Kind.QUERY, On.EVENT), shared=True, marks_stream_code=True),
    Method("capture_begin", Receiver.GRAPH, Operation(Kind.CAPTURE_BEGIN), marks_stream_code=True),
    Method("capture_end", Receiver.GRAPH, Operation(Kind.CAPTURE_END), marks_stream_code=True),
    Method("replay", Receiver.GRAPH, Operation(Kind.REPLAY), shared=True),
    Method("record_stream", Receiver.TENSOR, RECORD_STREAM, marks_stream_code=True),
    Method("backward", Receiver.TENSOR, Operation(Kind.BACKWARD), shared=True),
    *(
        Method(name, Receiver.TENSOR, Operation(Kind.REGISTER_HOOK), shared=True)
        for name in ("register_hook", "register_post_accumulate_grad_hook")
    ),
    *(
        Method(f"register_{name}", Receiver.MODULE, Operation(Kind.REGISTER_HOOK))
        for name in ("forward_hook", "forward_pre_hook", "full_backward_hook", "full_backward_pre_hook")
    ),
    Method("copy_", Receiver.TENSOR, COPY_INTO),
    Method("to", Receiver.TENSOR, COPY_EITHER, shared=True),
    Method("cuda", Receiver.TENSOR, Operation(Kind.COPY, direction=Direction.TO_DEVICE), shared=True),
    Method("cpu", Receiver.TENSOR, Operation(Kind.COPY, direction=Direction.TO_HOST, blocking=True), shared=True),
    Method("pin_memory", Receiver.TENSOR, PIN, marks_stream_code=True),
    Method("item", Receiver.TENSOR, HOST_READ, shared=True),
    Method("tolist", Receiver.TENSOR, HOST_READ, shared=True),
    Method("new_empty", Receiver.TENSOR, Operation(Kind.ALLOC), shared=True),
    Method("new_empty_strided", Receiver.TENSOR, Operation(Kind.ALLOC), shared=True),
    Method("resize_", Receiver.STORAGE, FREE, shared=True),  # with size 0
    Method("data_ptr", Receiver.TENSOR, ADDRESS, shared=True),
)
"""Methods, by name: one name, one operation."""

STREAM_HANDLE = "cuda_stream"
"""The attribute of a stream that is its raw handle: a call given it launches work of code the
analysis cannot read (a TensorRT engine's `execute_async_v3`, a C++ extension) on that stream,
which reads and writes the memory whose addresses were handed out (`ADDRESS`)."""
NON_BLOCKING = "non_blocking"
"""The keyword that makes a COPY whose `blocking` is None asynchronous."""
PIN_MEMORY = "pin_memory"
"""The keyword of tensor factories that allocate pinned host memory (`torch.empty(..., pin_memory=True)`)."""
STREAM_KEYWORD = "stream"
"""The keyword naming the stream a context enters or a capture runs on (`torch.cuda.stream(stream=s)`,
`torch.cuda.graph(g, stream=s)`)."""
DEVICE_KEYWORD = "device"
"""The keyword naming where a copy goes or a factory allocates (`t.to(device="cpu")`,
`torch.zeros(n, device="cpu")`): a COPY whose `direction` is EITHER is decided by it."""

SPELLING_MODULES: Mapping[str, str] = {
    "torch.cuda.streams": _CUDA,
    "torch.cuda.graphs": _CUDA,
    "torch.accelerator": _CUDA,
    "torch.accelerator.graphs": _CUDA,
    "torch.xpu": _CUDA,
    "torch.npu": _CUDA,
    "torch.mtia": _CUDA,
}
"""Modules whose members are the table's `torch.cuda` ones: `torch.cuda.streams.Stream` is
`torch.cuda.Stream`, and `torch.accelerator.current_stream()` is the CUDA one on a CUDA device."""
SPELLING_NAMES: Mapping[str, str] = {
    "torch.Stream": f"{_CUDA}.Stream",
    "torch.Event": f"{_CUDA}.Event",
    "torch.cuda.Graph": f"{_CUDA}.CUDAGraph",
}
"""The device-generic classes (`torch.accelerator.Graph` lands on `torch.cuda.Graph` first)."""
GENERIC_CLASSES = frozenset(name.rpartition(".")[2] for name in SPELLING_NAMES if name.count(".") == 1)
"""`torch.Stream`, `torch.Event`: the classes the device-generic API spells without `cuda`."""
GENERIC_FUNCTIONS = frozenset({"current_stream", "set_stream", "synchronize"})
"""The table's functions `torch.accelerator` spells as `torch.cuda` does (its other members are
device queries or the `Graph` class, a SPELLING_NAMES entry)."""

ACCELERATOR_FACTORIES = frozenset(
    {
        "deepspeed.accelerator.get_accelerator",
        "deepspeed.accelerator.real_accelerator.get_accelerator",
        "colossalai.accelerator.get_accelerator",
        "torch.get_device_module",
    }
)
"""Calls returning an object whose methods are the table's functions: `get_accelerator().Stream()`
(`Function.accelerator`)."""

SETTINGS: Mapping[str, Kind] = {
    "stream_contexts": Kind.ENTER_STREAM,
    "current_stream": Kind.CURRENT_STREAM,
    "stream_factories": Kind.STREAM_CREATE,
    "event_factories": Kind.EVENT_CREATE,
}
"""Each `Spellings` field (lint/model.py, `[tool.csan-lint]`): the operation its wrappers perform."""

_BY_NAME: Mapping[str, Function] = {function.name: function for function in FUNCTIONS}
_BY_METHOD: Mapping[str, Method] = {method.name: method for method in METHODS}
_RECORDS_STREAM = tuple(m.name for m in METHODS if m.op.kind is Kind.RECORD_STREAM)
_BY_ACCELERATOR: Mapping[str, str] = {
    spelling: entry.name
    for entry in FUNCTIONS
    if entry.accelerator is not None
    for spelling in (entry.accelerator, entry.name.rpartition(".")[2])
}


def function(name: str | None) -> Function | None:
    """The entry of a canonical name (lint/names.py `ImportTable.qualified`); None if it is none."""
    return _BY_NAME.get(name) if name is not None else None


def operation(name: str | None) -> Operation | None:
    """What calling a canonical name does; None for a name not in the table."""
    entry = function(name)
    return entry.op if entry is not None else None


def method(name: str) -> Method | None:
    """The entry of a method name; None for a method not in the table."""
    return _BY_METHOD.get(name)


def method_op(name: str) -> tuple[Operation | None, bool]:
    """What a call of method `name` does, and whether its receiver is a stream (`s.wait_event(e)`)
    rather than the event, graph or tensor the operation is named after (`e.wait(s)`)."""
    entry = _BY_METHOD.get(name)
    return (entry.op, entry.receiver is Receiver.STREAM) if entry is not None else (None, False)


def records_stream(name: str) -> bool:
    """`record_stream`, the method, or a helper named after it (`_no_dispatch_record_stream(t, s)`)."""
    return name.endswith(_RECORDS_STREAM)


def names(*kinds: Kind) -> frozenset[str]:
    """The canonical names of the callables performing one of `kinds`."""
    return frozenset(entry.name for entry in FUNCTIONS if entry.op.kind in kinds)


def methods(*receivers: Receiver, kinds: Iterable[Kind] = tuple(Kind)) -> frozenset[str]:
    """The names of the methods of `receivers` performing one of `kinds`."""
    wanted = frozenset(kinds)
    return frozenset(m.name for m in METHODS if m.receiver in receivers and m.op.kind in wanted)


def canonical_of(kind: Kind, on: On | None = None) -> str:
    """The first callable of the table performing `kind` (on `on`): the one a project's wrappers
    of that kind mean, and the name the analyses compare resolved names with."""
    return next(entry.name for entry in FUNCTIONS if entry.op.kind is kind and entry.op.on is on)


def accelerator_member(name: str) -> str | None:
    """The canonical name an accelerator object's method `name` calls (by its own name, or by
    torch.cuda's: `capture_to_graph`, `graph`); None for its other methods, whose torch.cuda
    namesakes may differ (DeepSpeed's `pin_memory(t)` is `t.pin_memory()`)."""
    return _BY_ACCELERATOR.get(name)


def stream_code_words() -> frozenset[str]:
    """The last names of the callables that mark stream code, and of the modules that spell them
    (`streams`, `graphs`): a file naming none of them (and no project wrapper, and no
    non-blocking copy) cannot be stream code."""
    leaves = {entry.name.rpartition(".")[2] for entry in FUNCTIONS if entry.marks_stream_code}
    modules = {module.rpartition(".")[2] for module in SPELLING_MODULES if module.startswith(f"{_CUDA}.")}
    return frozenset(leaves | modules)


def generic_words() -> frozenset[str]:
    """Stream-code names the device-generic API spells without `cuda`: `torch.Stream`,
    `torch.Event`, `torch.accelerator.current_stream`."""
    marking = {entry.name.rpartition(".")[2] for entry in FUNCTIONS if entry.marks_stream_code}
    return GENERIC_CLASSES | (GENERIC_FUNCTIONS & marking)


# ---- what a name alone says, where nothing binds it

_NAMED_STREAM = re.compile(r"(?i)stream$")
_NAMED_RECEIVER = re.compile(r"(?i)(?:event|evt|stream)s?$")
_NAMED_DEVICE_HANDLE = re.compile(r"(?:^|\.)_?device_(?:handle|module)$")
_DEVICE_WORD = re.compile(r"(?i)device|accelerator")


def names_a_stream(dotted: str) -> bool:
    """`with self.copy_stream:`: a dotted name ending so is taken for a stream when nothing
    binds it otherwise (lint/recognize.py)."""
    return _NAMED_STREAM.search(dotted) is not None


def names_an_event_or_stream(dotted: str) -> bool:
    """A receiver whose `record()`, `wait()`, `query()` (methods other objects share) are an
    event's or a stream's: `done_event.record()`, `evts[i].wait()`."""
    return _NAMED_RECEIVER.search(dotted) is not None


def names_a_device_module(dotted: str) -> bool:
    """Device-generic code (FSDP, DCP) reaches torch.cuda through an object named like
    `state._device_handle` or `self.device_module`: `torch.get_device_module(device)` at run time."""
    return _NAMED_DEVICE_HANDLE.search(dotted) is not None


def names_a_device(dotted: str) -> bool:
    """A name that holds a device or its type (`device.type`, `self.accelerator_name`):
    `getattr(torch, device.type)` picks a device module, `getattr(torch, dtype_name)` does not."""
    return _DEVICE_WORD.search(dotted) is not None
