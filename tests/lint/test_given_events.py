"""An event a function is given and waits on, never recording it, was recorded by the caller
after its writes (`unrecorded-events-follow-callers-work`): it orders the caller's tensors, not
the function's own work, and the functions it calls after the wait see that order."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


def test_the_wait_does_not_order_what_the_function_wrote_before_it() -> None:
    source = """
    import torch

    def encode(frame: torch.Tensor, ready: torch.cuda.Event, side: torch.cuda.Stream) -> None:
        scaled = frame * 2
        side.wait_event(ready)
        with torch.cuda.stream(side):
            frame.add_(1)
            scaled.add_(1)
        torch.cuda.current_stream().wait_stream(side)
    """
    assert findings(source) == [("CSL101", 9), ("CSL103", 8)]  # frame: read here, then written there


def test_a_method_called_after_the_wait_is_entered_ordered() -> None:
    source = """
    import torch

    class Encoder:
        def __init__(self):
            self.stream = torch.cuda.Stream()

        def handle(self, frame: torch.Tensor, ready: torch.cuda.Event) -> None:
            self.stream.wait_event(ready)
            self._encode(frame)

        def _encode(self, frame: torch.Tensor) -> None:
            with torch.cuda.stream(self.stream):
                frame.mul_(2)
            torch.cuda.current_stream().wait_stream(self.stream)
    """
    assert findings(source) == []
    assert findings(source.replace("self.stream.wait_event(ready)", "pass")) == [("CSL101", 10), ("CSL101", 14)]
