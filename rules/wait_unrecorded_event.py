"""CSL401: a stream waits on an event that is not recorded on every path before the wait."""

from __future__ import annotations

from collections.abc import Iterator

from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.model import Finding
from csan_lint.lint.rule import Invalid, Rule, Valid
from csan_lint.lint.wording import host_fields
from csan_lint.runtime.kinds import WAIT_UNRECORDED_EVENT


class WaitUnrecordedEvent(Rule):
    """
    ## What it does
    Flags `s.wait_event(e)` and `e.wait()` / `e.wait(s)` on an event made in the same function
    (`e = torch.cuda.Event()`) when some path from its creation to the wait records it nowhere
    (`e.record()`, `s.record_event(e)`). Loops count: a wait at the top of the body and a
    record at the bottom leave the first iteration's wait unrecorded.

    ## Why is this bad?
    Waiting on an event that was never recorded returns at once: CUDA treats it as already
    complete. The wait orders nothing, so the work it was meant to protect races with the
    producer, silently, and only on the paths where the record was skipped.

    ## Assumptions
    Every path from the event's creation to the wait may run: conditions are not correlated,
    but for those on a counted loop's index (`for i in range(n + 1)`): a wait under `if i > 1`
    after a record made in the previous pass under `if i < n` is ordered, since every pass but
    the last takes `i < n`. Tests against literals up to 4 passes in are decided. An event made
    with `torch.cuda.Event()` in the function is unrecorded until a `record()`/`record_event()`
    on some stream.

    ## Known problems
    Events made elsewhere (parameters, attributes set in `__init__`) are not followed, nor are
    events handed to other functions, which might record them. An event recorded only in the
    previous call of a method is out of reach too.
    """

    code = "CSL401"
    name = "wait-unrecorded-event"
    summary = "waiting on an event that is never recorded on that path (no ordering)"
    message = "event '{event}' is waited on before it is recorded on every path: the wait orders nothing"
    fix_title = "record '{event}' on the producing stream (`{event}.record()`) on every path before waiting on it"
    confirmed_by = (WAIT_UNRECORDED_EVENT,)

    VALID = [
        Valid(
            """
            import torch

            def step(x, s):
                ready = torch.cuda.Event()
                y = x * 2
                ready.record()
                s.wait_event(ready)
            """
        ),
        Valid(
            """
            import torch

            def step(x, s, flag):
                ready = torch.cuda.Event()
                if flag:
                    ready.record()
                else:
                    torch.cuda.current_stream().record_event(ready)
                ready.wait(s)
            """
        ),
        Valid(
            """
            import torch

            def step(x, s):
                ready = torch.cuda.current_stream().record_event()
                s.wait_event(ready)
            """
        ),
        Valid(
            """
            import torch

            def step(x, s, producer):
                ready = torch.cuda.Event()
                producer.launch(x, ready)
                s.wait_event(ready)
            """
        ),
        Valid(
            """
            import torch

            def step(batches, s):
                for batch in batches:
                    ready = torch.cuda.Event()
                    ready.record()
                    s.wait_event(ready)
            """
        ),
        Valid(
            """
            import torch

            def step(s, ready):
                s.wait_event(ready)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            ready = torch.cuda.Event()
            side = torch.cuda.Stream()
            side.wait_event(ready)
            """,
            lines=(5,),
        ),
        Invalid(
            """
            import torch

            def step(x, s, flag):
                ready = torch.cuda.Event()
                if flag:
                    ready.record()
                with torch.cuda.stream(s):
                    ready.wait()
                    y = x * 2
                return y
            """,
            lines=(8,),
        ),
        Invalid(
            """
            import torch

            def pipeline(batches, s):
                copied = torch.cuda.Event()
                for batch in batches:
                    torch.cuda.current_stream().wait_event(copied)
                    with torch.cuda.stream(s):
                        batch.mul_(2)
                        copied.record()
            """,
            lines=(6,),
        ),
        Invalid(
            """
            from torch.cuda import Event, Stream

            def step(x):
                done, side = Event(), Stream()
                done = Event(enable_timing=True)
                side.wait_event(done)
            """,
            lines=(6,),
        ),
    ]

    def check(self, flow: ModuleFlow) -> Iterator[Finding]:
        for hazard in flow.host_hazards:
            if hazard.kind == WAIT_UNRECORDED_EVENT:
                yield self.finding(flow.path, **flow.location(hazard), **host_fields(flow, hazard))
