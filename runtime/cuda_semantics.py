"""CUDA's semantics, stated once: for each torch action, the engine events it causes, and the
line of CUDA's or torch's documentation that says so. The emulated device fires the traced
ones (the `torch.cuda._gpu_trace` callbacks a CUDA build fires), the sanitizer issues the
untraced ones (from its dispatch mode and its wrappers), and neither decides a sync on its own:
both ask this module. Torch-free, so the engine side may import it.

Sources, quoted where used:
- CUDA Runtime API, "API synchronization behavior" (CUDA_RUNTIME: docs.nvidia.com/cuda/
  cuda-runtime-api/api-sync-behavior.html) and "Stream synchronization behavior"
  (stream-sync-behavior.html);
- the CUDA Runtime API reference of each call named (cudaStreamWaitEvent, cudaEventQuery, ...);
- torch.cuda's documentation (pytorch.org/docs/stable/cuda.html, notes/cuda.html) and, where
  the documentation is silent, the torch 2.13 source line that fires the trace callback.
"""

from __future__ import annotations

from dataclasses import dataclass

CUDA_SYNC_BEHAVIOR = "CUDA Runtime API, API synchronization behavior"
CUDA_STREAM_SYNC = "CUDA Runtime API, Stream synchronization behavior"
TORCH_CUDA_DOCS = "torch.cuda documentation"
CUDA_GRAPHS_DOCS = "torch.cuda CUDA Graphs notes (notes/cuda.html#cuda-graphs)"


@dataclass(frozen=True)
class Source:
    document: str
    quote: str


# -- copies between host and device ---------------------------------------------------------

H2D, D2H = "host_to_device", "device_to_host"


@dataclass(frozen=True)
class CopyEffect:
    """What one host<->device copy makes the engine see: the copy is a kernel on the current
    stream (always); `host_pending`: its host side is an access of that kernel, pending until
    the host syncs with the stream; `host_syncs`: the host waits for the stream once the copy
    is issued (a `stream_synchronized` after the launch); `sync_traced`: a CUDA build fires the
    stream-synchronization trace callback for that wait (the emulated device fires it too; an
    untraced wait is the dispatch mode's to issue, and it issues every one after its launch,
    since a callback fired inside the op comes before the launch the mode reports)."""

    direction: str
    pinned: bool
    non_blocking: bool
    host_syncs: bool
    sync_traced: bool
    host_pending: bool
    source: Source

    def engine_events(self) -> tuple[str, ...]:
        """In the engine's order: a traced sync fires inside the op, before the dispatch mode
        reports the op's launch (and is then issued again after it, which orders the copy)."""
        launch = ("kernel_launched", "stream_synchronized") if self.host_syncs else ("kernel_launched",)
        return ("stream_synchronized", *launch) if self.sync_traced else launch


_BLOCKING = Source(
    "torch 2.13, aten/src/ATen/native/cuda/Copy.cu (copy_kernel_cuda)",
    "a copy that is not non_blocking calls at::cuda::memcpy_and_sync, which fires "
    "trace_gpu_stream_synchronization and then cudaStreamSynchronize",
)
_PAGEABLE_TO_DEVICE = Source(
    CUDA_SYNC_BEHAVIOR,
    "Asynchronous: For transfers from pageable host memory to device memory, host memory is "
    "copied to a staging buffer immediately (no device synchronization is performed).",
)
_TO_PAGEABLE_HOST = Source(
    CUDA_SYNC_BEHAVIOR,
    "Asynchronous: For transfers from device memory to pageable host memory, the function will "
    "return only once the copy has completed.",
)
_PINNED = Source(
    CUDA_SYNC_BEHAVIOR,
    "Asynchronous: For transfers between device memory and pinned host memory, the function is fully asynchronous.",
)

COPIES: dict[tuple[str, bool, bool], CopyEffect] = {}
"""(direction, host side pinned, non_blocking) -> effect: every combination."""
for _direction in (H2D, D2H):
    for _pinned in (False, True):
        COPIES[(_direction, _pinned, False)] = CopyEffect(_direction, _pinned, False, True, True, False, _BLOCKING)
    COPIES[(_direction, True, True)] = CopyEffect(_direction, True, True, False, False, True, _PINNED)
COPIES[(H2D, False, True)] = CopyEffect(H2D, False, True, False, False, False, _PAGEABLE_TO_DEVICE)
COPIES[(D2H, False, True)] = CopyEffect(D2H, False, True, True, False, False, _TO_PAGEABLE_HOST)


def copy_effect(to_host: bool, pinned: bool, non_blocking: bool) -> CopyEffect:
    """The effect of a copy between host and device (`to_host`: device to host)."""
    return COPIES[(D2H if to_host else H2D, pinned, bool(non_blocking))]


def to_copy_pins_result(to_host: bool, non_blocking: bool) -> bool:
    """Whether `_to_copy` allocates its host result pinned. torch 2.13,
    aten/src/ATen/native/TensorConversions.cpp (_to_copy): "pin_out = non_blocking &&
    self.is_cuda() && options.device().is_cpu() && options.layout() == kStrided", so
    `.to('cpu', non_blocking=True)` is an asynchronous copy into pinned memory."""
    return to_host and bool(non_blocking)


# -- ops that sync the host ------------------------------------------------------------------

HOST_SYNC_SOURCE = Source(
    "torch 2.13, aten/src/ATen/native/cuda (each op below)",
    "the op ends with at::cuda::memcpy_and_sync or an .item() on the current stream, which "
    "fires the stream-synchronization trace callback: the host waits for the current stream",
)
HOST_SYNC_OPS: dict[str, str | None] = {
    "aten::_local_scalar_dense": None,  # .item(): memcpy_and_sync of the scalar
    "aten::is_nonzero": None,  # bool(x): .item()
    "aten::nonzero": None,  # the count of nonzeros sizes the result: memcpy_and_sync
    "aten::masked_select": None,  # the mask's count sizes the result
    "aten::equal": None,  # .item() of the comparison
    "aten::allclose": None,
    "aten::bincount": None,  # self.max().item() sizes the result
    "aten::unique_consecutive": None,  # the number of uniques sizes the result
    "aten::unique_dim": None,
    "aten::unique_dim_consecutive": None,
    "aten::_unique": None,
    "aten::_unique2": None,
    "aten::mode": None,  # memcpy_and_sync of the index
    "aten::_linalg_check_errors": None,  # info.item() for the error message
    # The repeats' sum sizes the result, unless the caller gives it.
    "aten::repeat_interleave": "output_size",
}
"""Host-syncing ops by name, with the argument that, when given, spares the sync. Each is a
kernel then a traced `stream_synchronized` of the current stream."""

MASK_INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"})
"""Ops that sync when an index is a boolean mask (it goes through nonzero)."""


# -- streams, events, syncs ------------------------------------------------------------------


@dataclass(frozen=True)
class Effect:
    """A stream/event/sync action: the engine calls it makes, whether a CUDA build fires them
    as trace callbacks (`traced`; else the sanitizer's wrapper of `methods` issues them), and why."""

    engine: tuple[str, ...]
    traced: bool
    source: Source
    methods: tuple[tuple[str, str], ...] = ()


EVENT_CLASSES = ("torch.cuda.Event", "torch.Event")
STREAM_CLASSES = ("torch.cuda.Stream", "torch.Stream")
"""Both spellings of CUDA's events and streams: the device-generic `torch.Event`/`torch.Stream`
reach the same CUDA calls (c10's CUDAGuardImpl) but are distinct Python classes."""

UNRECORDED_EVENT = 0
"""The handle a never-recorded event has (CUDA creates events on their first record)."""

ACTIONS: dict[str, Effect] = {
    "event record": Effect(
        ("event_created", "event_recorded"),
        True,
        Source(
            TORCH_CUDA_DOCS, "torch.cuda.Event: CUDA events ... are lazily initialized when the event is first recorded"
        ),
    ),
    "event wait (recorded)": Effect(
        ("event_waited",),
        True,
        Source(
            "CUDA Runtime API, cudaStreamWaitEvent",
            "Makes all future work submitted to stream wait for all work captured in event.",
        ),
    ),
    "event wait (never recorded)": Effect(
        ("event_waited",),
        False,
        Source(
            "torch 2.13, c10/cuda/impl/CUDAGuardImpl.h block() and CUDAEvent::block",
            "a wait on an event never recorded returns at once (no event exists yet): it orders "
            "nothing and fires no callback; the sanitizer reports it as wait-unrecorded",
        ),
        # torch.Stream.wait_event is C++ that blocks on the event without torch.Event.wait;
        # torch.cuda.Stream.wait_event is Python that calls torch.cuda.Event.wait.
        (*((cls, "wait") for cls in EVENT_CLASSES), ("torch.Stream", "wait_event")),
    ),
    "event query": Effect(
        ("event_queried",),
        False,
        Source("CUDA Runtime API, cudaEventQuery", "Returns cudaSuccess if all captured work has been completed"),
        tuple((cls, "query") for cls in EVENT_CLASSES),
    ),
    "event synchronize": Effect(
        ("event_synchronized",),
        True,
        Source(
            "CUDA Runtime API, cudaEventSynchronize",
            "Waits until the completion of all work currently captured in event.",
        ),
    ),
    "stream query": Effect(
        ("stream_queried",),
        False,
        Source("CUDA Runtime API, cudaStreamQuery", "Returns cudaSuccess if all operations in stream have completed"),
        tuple((cls, "query") for cls in STREAM_CLASSES),
    ),
    "stream synchronize": Effect(
        ("stream_synchronized",),
        True,
        Source("CUDA Runtime API, cudaStreamSynchronize", "Blocks until stream has completed all operations."),
    ),
    "device synchronize": Effect(
        ("device_synchronized",),
        True,
        Source(
            TORCH_CUDA_DOCS, "torch.cuda.synchronize: Wait for all kernels in all streams on a CUDA device to complete."
        ),
    ),
    "stream wait_stream": Effect(
        # torch records a temporary event on the other stream and waits on it; it dies at once.
        ("event_created", "event_recorded", "event_waited", "event_deleted"),
        True,
        Source(
            TORCH_CUDA_DOCS,
            "Stream.wait_stream: All future work submitted to this stream will wait until all "
            "kernels submitted to a given stream at the time of call complete.",
        ),
    ),
    "pool stream": Effect(
        ("stream_created",),
        True,
        Source(
            "torch 2.13, c10/cuda/CUDAStream.cpp",
            "kStreamsPerPool = 32 streams per priority, created with cudaStreamNonBlocking on the "
            "pool's first use, handed out round-robin",
        ),
    ),
    "external stream": Effect(
        ("stream_created",),
        False,
        Source(
            CUDA_STREAM_SYNC,
            "The legacy default stream is an implicit stream which synchronizes with all other "
            "blocking streams in the same CUcontext. ... non-blocking streams (cudaStreamNonBlocking) "
            "do not synchronize with the legacy default stream",
        ),
        (("torch.cuda.ExternalStream", "__new__"), ("torch.cuda", "get_stream_from_external")),
    ),
    "record_stream": Effect(
        ("stream_recorded",),
        False,
        Source(
            TORCH_CUDA_DOCS,
            "Tensor.record_stream: Ensure that the tensor memory is not reused for another "
            "tensor until all current work queued on stream are complete.",
        ),
        (("torch.Tensor", "record_stream"),),
    ),
    "allocation": Effect(
        ("allocated",),
        True,
        Source(
            TORCH_CUDA_DOCS,
            "notes/cuda.html, stream semantics: the caching allocator ... associates each block "
            "with the stream it was allocated on; a freed block can be reused at once on that stream",
        ),
    ),
    "free": Effect(
        ("freed",), True, Source(TORCH_CUDA_DOCS, "the caching allocator's free of a block (see allocation)")
    ),
}
"""Each action's engine events (their names are the engine's calls, trace.EVENTS's keys)."""

LEGACY_DEFAULT_STREAM_PER_DEVICE = Source(
    CUDA_STREAM_SYNC,
    "The legacy default stream ... synchronizes with all other blocking streams in the same "
    "CUcontext: each device (its primary context) has its own, ordering only that device's "
    "blocking streams",
)

COPY_BETWEEN_DEVICES = Source(
    "torch 2.13, aten/src/ATen/native/cuda/Copy.cu (copy_device_to_device)",
    "We always perform the copy on the source device, using the current stream on the source "
    "device, and we fully synchronize on both src and dst's current streams for completion of the "
    "copy. ... src waits on dst barrier (src already waits on src) ... dst waits on src barrier "
    "(dst already waits on dst). We cannot operate on dst's copy until the copy is complete.",
)
"""A copy between devices (`copy_`, `.to("cuda:k")`, a storage's `.cuda(k)`): the source device's
current stream waits for the destination's current stream, runs the copy, and the destination's
current stream then waits for it: both current streams are ordered, no other stream is."""

WAIT_ON_EVENT_RECORDED_EARLIER = Source(
    "csan-lint's reading of cudaStreamWaitEvent for an event recorded before checking began",
    "the event was recorded (its handle exists) at a point the engine did not see: the wait "
    "orders the waiter after work the engine never saw, so it orders nothing it tracks and is no "
    "wait-unrecorded",
)


# -- CUDA graphs -----------------------------------------------------------------------------

CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")
CAPTURE_ERROR_MODE_SOURCE = Source(
    TORCH_CUDA_DOCS,
    "torch.cuda.graph(capture_error_mode): 'global' ... prohibits potentially unsafe API calls "
    "in any thread, 'thread_local' ... only the capturing thread, 'relaxed' ... no such calls "
    "are prohibited",
)
CAPTURE_ON_DEFAULT_STREAM = Source(
    CUDA_GRAPHS_DOCS,
    "CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok "
    "to replay them on the default stream.)",
)
CAPTURE_JOIN = Source(
    CUDA_GRAPHS_DOCS,
    "side streams used during capture must be forked from the capturing stream and rejoined "
    "before capture ends; event waits during capture are graph edges, not waits",
)
CAPTURE_FORBIDDEN = "CUDA error: operation not permitted when stream is capturing"
"""What CUDA raises for a synchronizing call a capture forbids."""


def capture_forbids_sync(mode: str, same_thread: bool) -> bool:
    """Whether a device-wide sync during a capture in `mode` raises (`same_thread`: the calling
    thread began the capture)."""
    return mode == "global" or (mode == "thread_local" and same_thread)


def capture_is_lenient(mode: str) -> bool:
    """Whether a capture in `mode` lets another thread's launches go on (the engine then does
    not report them as launched outside the capture)."""
    return mode != "global"


# -- the caching allocator's block sizes -----------------------------------------------------

CACHING_ALLOCATOR = Source(
    "torch 2.13, c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size, get_pool)",
    "kMinBlockSize = 512: all sizes are rounded to at least 512 bytes; kSmallSize = 1048576: "
    "largest 'small' allocation is 1 MiB; kSmallBuffer = 2 MiB, kLargeBuffer = 20 MiB, "
    "kMinLargeAlloc = 10 MiB, kRoundLarge = 2 MiB; a block is cached per stream and pool",
)
MIN_BLOCK_SIZE = 512
"""kMinBlockSize: every request is rounded up to a multiple of this."""
SMALL_SIZE = 1 << 20
"""kSmallSize: requests up to this come from the small pool, larger ones from the large pool;
a block of one pool never serves the other's requests."""
SMALL_BUFFER = 2 << 20
"""kSmallBuffer: a small-pool segment."""
LARGE_BUFFER = 20 << 20
"""kLargeBuffer: a segment for large requests under kMinLargeAlloc."""
MIN_LARGE_ALLOC = 10 << 20
"""kMinLargeAlloc."""
ROUND_LARGE = 2 << 20
"""kRoundLarge: larger segments are rounded up to a multiple of this."""


def round_size(size: int) -> int:
    """The block size the caching allocator serves a request of `size` bytes with."""
    if size < MIN_BLOCK_SIZE:
        return MIN_BLOCK_SIZE
    return -(-size // MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    """The segment the caching allocator asks the driver for, to serve a rounded request."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def may_serve(block_size: int, request: int) -> bool:
    """Whether a cached block that served a request of `block_size` bytes may be handed (split
    if larger) to a request of `request` bytes on its stream: same pool, large enough once both
    are rounded."""
    block, wanted = round_size(block_size), round_size(request)
    return wanted <= block and (wanted <= SMALL_SIZE) == (block <= SMALL_SIZE)
