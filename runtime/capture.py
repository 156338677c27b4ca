"""A CUDA graph being captured, as the engine sees it: which streams are in the graph, what
of the graph each is ordered after, and the side streams' launches the capture stream must
join before the capture ends (cuda_semantics.CAPTURE_JOIN). Torch-free."""

from __future__ import annotations

from csan_lint.runtime.cells import Clock
from csan_lint.runtime.events import AccessRecord
from csan_lint.runtime.stacks import EMPTY_STACK, Stack

CAPTURE_BEGIN_OPERATOR = "capture_begin"
CAPTURE_END_OPERATOR = "capture_end"

Unjoined = tuple[AccessRecord, AccessRecord]
"""An unjoined-capture-fork: (the offending access, what it should have been ordered with)."""


class GraphCapture:
    """A graph being captured. Event records and waits between its streams are graph edges:
    they order nothing now, so they live in the capture's own clocks, never the streams'."""

    __slots__ = ("clocks", "events", "lenient", "side", "stack", "stream")

    def __init__(self, stream: int, begin_seq: int, stack: Stack | None, lenient: bool) -> None:
        self.stream = stream
        self.stack = stack
        self.lenient = lenient
        """A thread-local or relaxed capture, where launches on streams outside the graph are
        the program's live work, not a side stream it forgot to fork."""
        self.side: dict[int, tuple[int, str, Stack | None]] = {}  # last launch per side stream
        # Per stream in the graph (the capture stream, and each stream that waited on an
        # event recorded in the graph): what of the graph it is ordered after.
        self.clocks: dict[int, Clock] = {stream: {stream: begin_seq}}
        self.events: dict[int, Clock] = {}  # events recorded in the graph

    def begin(self) -> AccessRecord:
        return AccessRecord(self.stream, CAPTURE_BEGIN_OPERATOR, "", False, self.stack or EMPTY_STACK)

    def launched(self, stream: int, operator: str, stack: Stack | None, seq: int) -> Unjoined | None:
        """A launch during capture; on a stream not forked from the capture stream it is not
        part of the graph, an unjoined fork unless the capture is lenient."""
        graph_clock = self.clocks.get(stream)
        if graph_clock is None:
            if self.lenient:
                return None
            return AccessRecord(stream, operator, "", False, stack or EMPTY_STACK), self.begin()
        graph_clock[stream] = seq
        if stream != self.stream:
            self.side[stream] = (seq, operator, stack)
        return None

    def ended(self, stream: int, stack: Stack | None) -> list[Unjoined]:
        """Capture must end on its stream, after the capture stream joined every side stream used."""
        end = AccessRecord(stream, CAPTURE_END_OPERATOR, "", False, stack or EMPTY_STACK)
        unjoined = [(end, self.begin())] if stream != self.stream else []
        clock = self.clocks[self.stream]
        for side, (seq, operator, side_stack) in self.side.items():
            if clock.get(side, 0) < seq:
                unjoined.append((end, AccessRecord(side, operator, "", False, side_stack or EMPTY_STACK)))
        return unjoined
