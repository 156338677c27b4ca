"""The runtime error kinds: the vocabulary that rules declare (`confirmed_by`) and the
sanitizer reports, and the code each has when a race is reported on its own (CSL9xx): the one
declaration of both. Plain strings so that the static half can use them without the runtime."""

from __future__ import annotations

from dataclasses import dataclass

READ_AFTER_WRITE = "read-after-write"
WRITE_AFTER_READ = "write-after-read"
WRITE_AFTER_WRITE = "write-after-write"
FREE_IN_USE = "free-in-use"
"""A freed block handed out again (an allocation its stream's pool may serve) before the
allocating stream is ordered after another stream's use of it, with no `record_stream`."""
HOST_READ_PENDING = "host-read-pending"
HOST_WRITE_PENDING = "host-write-pending"
CAPTURE_ON_DEFAULT_STREAM = "capture-on-default-stream"
UNJOINED_CAPTURE_FORK = "unjoined-capture-fork"
WAIT_UNRECORDED_EVENT = "wait-unrecorded-event"


@dataclass(frozen=True)
class RuntimeCode:
    """The code of a race that no static finding explains (`--confirm`'s runtime-only races,
    `pytest --csan`'s races): selected, ignored and suppressed like a rule's."""

    code: str
    kind: str
    summary: str

    @property
    def name(self) -> str:
        """`runtime-` and the kind: three kinds share their names with the static rules."""
        return f"runtime-{self.kind}"


RUNTIME_CODES = (
    RuntimeCode(
        "CSL901",
        READ_AFTER_WRITE,
        "a kernel reads memory whose last write, on another stream, is not ordered before it",
    ),
    RuntimeCode(
        "CSL902",
        WRITE_AFTER_READ,
        "a kernel writes memory that another stream read without being ordered before the write",
    ),
    RuntimeCode("CSL903", WRITE_AFTER_WRITE, "two writes on different streams with no ordering between them"),
    RuntimeCode(
        "CSL904",
        FREE_IN_USE,
        "a block freed while another stream's access is neither ordered before the allocating stream nor "
        "recorded (`record_stream`): the caching allocator may hand it out again at once",
    ),
    RuntimeCode("CSL905", HOST_READ_PENDING, "the host reads memory that a non-blocking copy may still be writing"),
    RuntimeCode("CSL906", HOST_WRITE_PENDING, "the host writes memory that a non-blocking copy may still be reading"),
    RuntimeCode("CSL907", CAPTURE_ON_DEFAULT_STREAM, "CUDA graph capture begun on the default stream"),
    RuntimeCode(
        "CSL908",
        UNJOINED_CAPTURE_FORK,
        "a stream used during capture that was not forked from / joined back to the capture stream",
    ),
    RuntimeCode(
        "CSL909",
        WAIT_UNRECORDED_EVENT,
        "a stream waited on an event that was never recorded: the wait orders nothing (a warning)",
    ),
)
ALL_KINDS = tuple(entry.kind for entry in RUNTIME_CODES)
UNKNOWN_KIND_CODE = "CSL999"
"""A kind this table does not know yet (a newer sanitizer): still reported, never dropped."""
_CODE_OF_KIND = {entry.kind: entry.code for entry in RUNTIME_CODES}


def code_of(kind: str) -> str:
    """The code a race of `kind` is reported with."""
    return _CODE_OF_KIND.get(kind, UNKNOWN_KIND_CODE)


def runtime_codes_of(selector: str) -> frozenset[str]:
    """The runtime codes a selector means: `ALL`, a code prefix (`CSL9`), a code or a name."""
    return frozenset(
        entry.code for entry in RUNTIME_CODES if selector in ("ALL", entry.name) or entry.code.startswith(selector)
    )
