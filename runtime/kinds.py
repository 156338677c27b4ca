"""The runtime error kinds: the vocabulary that rules declare (`confirmed_by`) and the
sanitizer reports. Plain strings so that the static half can use them without the runtime."""

READ_AFTER_WRITE = "read-after-write"
"""A kernel reads memory whose last write, on another stream, is not ordered before it."""
WRITE_AFTER_READ = "write-after-read"
"""A kernel writes memory that another stream read without being ordered before the write."""
WRITE_AFTER_WRITE = "write-after-write"
"""Two writes on different streams with no ordering between them."""
FREE_IN_USE = "free-in-use"
"""A freed block handed out again (an allocation its stream's pool may serve) before the
allocating stream is ordered after another stream's use of it, with no `record_stream`."""
HOST_READ_PENDING = "host-read-pending"
"""The host reads memory that a non-blocking copy may still be writing."""
HOST_WRITE_PENDING = "host-write-pending"
"""The host writes memory that a non-blocking copy may still be reading."""
CAPTURE_ON_DEFAULT_STREAM = "capture-on-default-stream"
"""CUDA graph capture begun on the default stream."""
UNJOINED_CAPTURE_FORK = "unjoined-capture-fork"
"""A stream used during capture that was not forked from / joined back to the capture stream."""
WAIT_UNRECORDED_EVENT = "wait-unrecorded-event"
"""A stream waited on an event that was never recorded: the wait orders nothing."""

ALL_KINDS = (
    READ_AFTER_WRITE,
    WRITE_AFTER_READ,
    WRITE_AFTER_WRITE,
    FREE_IN_USE,
    HOST_READ_PENDING,
    HOST_WRITE_PENDING,
    CAPTURE_ON_DEFAULT_STREAM,
    UNJOINED_CAPTURE_FORK,
    WAIT_UNRECORDED_EVENT,
)
