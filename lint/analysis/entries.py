"""The assumptions about a function's entry: which stream it is entered on and what ordered the
caller's work before it. Entries of the table in lint/analysis/assumptions.py, which asks them
alike; kept apart only to keep each file readable in one sitting. Pure data.
"""

from __future__ import annotations

from csan_lint.lint.analysis.assumption import Assumption

ENTRY_STREAM_FROM_CALLS = "entry-stream-from-calls"
KEPT_CURRENT_STREAM = "kept-current-stream-is-callers"
UNRECORDED_EVENTS_FOLLOW_CALLERS = "unrecorded-events-follow-callers-work"
ENTRY_STREAM_IS_DEFAULT = "entry-stream-is-default"

ENTRIES: tuple[Assumption, ...] = (
    Assumption(
        ENTRY_STREAM_FROM_CALLS,
        "A function every call of which (in its module) is made inside `with stream(S):` is entered on S.",
        "Its body then runs on S, and its tensor parameters were written by the caller on the "
        "stream current before the block, except one every call gives a value made inside its "
        "block (written on S). Off, every function is entered on its caller's current stream.",
        example="""\
import torch


class Reducer:
    def hook(self, grad):
        with torch.cuda.stream(self.post):
            self.reduce(grad)

    def reduce(self, grad):
        out = grad * 2
        self.comm.wait_stream(self.post)
        with torch.cuda.stream(self.comm):
            total = out.sum()
        torch.cuda.current_stream().wait_stream(self.comm)
        return total
""",
        when_on=(),
        when_off=(("CSL101", 13), ("CSL201", 15)),
        default=True,
        rules=("CSL101", "CSL102", "CSL201"),
    ),
    Assumption(
        KEPT_CURRENT_STREAM,
        "A stream kept in `__init__` from `current_stream()` and never rebound is the stream "
        "current where the object's other methods are called.",
        "An offloader keeps `self.compute = current_stream()` to order its side stream after the "
        "user's stream. Off, it is a stream of its own.",
        example="""\
import torch


class Prefetcher:
    def __init__(self):
        self.compute = torch.cuda.current_stream()
        self.copy = torch.cuda.Stream()

    def prefetch(self, x: torch.Tensor) -> torch.Tensor:
        self.copy.wait_stream(self.compute)
        with torch.cuda.stream(self.copy):
            y = x * 2
        torch.cuda.current_stream().wait_stream(self.copy)
        return y
""",
        when_on=(),
        when_off=(("CSL101", 12),),
        default=True,
        rules=("CSL101", "CSL102"),
    ),
    Assumption(
        UNRECORDED_EVENTS_FOLLOW_CALLERS,
        "An event of the object's or a parameter that a function waits on and never records was "
        "recorded by its caller, or the method that produced the tensors it uses, after writing them.",
        "A stream that waits on such an event is ordered after the caller's work. Off, the wait "
        "orders nothing the function can see, and the caller's tensors it reads are judged as if "
        "no wait were made. On by default (an event of the object's was always taken so), "
        "measured in round 19 on the development data: off, the eleven repositories get 4 "
        "findings in Megatron's inference controller, whose copy stream waits on an event of the "
        "controller's, and the fixed versions of held-out sets 1-11 two more (jasna's encoder, "
        "given the producer's event); the corpus and the sets find the same.",
        example="""\
import torch


def encode(frame: torch.Tensor, ready: torch.cuda.Event, side: torch.cuda.Stream) -> None:
    side.wait_event(ready)
    with torch.cuda.stream(side):
        frame.mul_(2)
    torch.cuda.current_stream().wait_stream(side)
""",
        when_on=(),
        when_off=(("CSL101", 7),),
        default=True,
        rules=("CSL101", "CSL201"),
    ),
    Assumption(
        ENTRY_STREAM_IS_DEFAULT,
        "The stream current at a function's entry is the device's default stream, unless the "
        "module's calls of it are seen to enter it on another.",
        "On, a side stream that waits on `default_stream()` is ordered after the caller's work, "
        "and `default_stream().wait_stream(side)` joins the side stream back into it (so "
        "`default-stream-join` finds nothing). Off, `default_stream()` in a function is a stream "
        "of its own, which a caller may have left for a side stream (DDP's and ZeRO's hooks run "
        "on their communication streams). Off by default, measured in round 19 on the development "
        "data: on, the corpus loses three known bugs (Megatron's DDP joins on the default stream, "
        "DeepSpeed ZeRO-3's), the eleven repositories lose 2 true findings (ZeRO-3), held-out "
        "sets 1-11 find the same and have 3 findings fewer on fixed versions. For code that is "
        "never called under a side stream.",
        example="""\
import torch


def scale(x: torch.Tensor, side: torch.cuda.Stream) -> torch.Tensor:
    side.wait_stream(torch.cuda.default_stream())
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    return y
""",
        when_on=(),
        when_off=(("CSL101", 7),),
        default=False,
        rules=("CSL101", "CSL102"),
    ),
)
