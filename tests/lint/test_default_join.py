"""A wait of the default stream on a side stream, written for a join of the caller's stream: the
caller may run on another stream (a stream context, a CUDA-graph capture), whose next work is
then not ordered after the side stream (CSL102 at the wait, lint/defaultjoin.py)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


FINISH = """
import torch

class Reducer:
    def finish(self):
        {body}
"""


@pytest.mark.parametrize(
    "body",
    [
        "torch.cuda.default_stream().wait_stream(self.comm_stream)",  # an attribute, no block of its own
        "torch.cuda.default_stream().wait_event(self.done)",  # an event recorded by another method
        "torch.cuda.default_stream().wait_event(self.comm_stream.record_event())",
        "torch.cuda.default_stream(self.device).wait_stream(self.comm_stream)",
    ],
)
def test_a_join_into_the_default_stream_with_no_block_of_its_own_is_flagged_at_the_wait(body: str) -> None:
    assert findings(FINISH.format(body=body)) == [("CSL102", 6)]


def test_the_message_says_the_default_stream_is_not_the_callers_and_the_fix_waits_on_the_current_one() -> None:
    source = FINISH.format(body="torch.cuda.default_stream().wait_stream(self.comm_stream)")
    (finding,) = lint_source(textwrap.dedent(source), "m.py")
    assert "the default stream, not the caller's, waits on side stream 'self.comm_stream'" in finding.message
    assert "'Reducer.finish'" in finding.message
    assert (
        finding.fix
        == "wait on the caller's stream instead: `torch.cuda.current_stream().wait_stream(self.comm_stream)`"
    )


def test_an_event_wait_is_fixed_by_an_event_wait_on_the_current_stream() -> None:
    (finding,) = lint_source(
        textwrap.dedent(FINISH.format(body="torch.cuda.default_stream().wait_event(self.done)")), "m.py"
    )
    assert "waits on event 'self.done'" in finding.message
    assert finding.fix is not None and "`torch.cuda.current_stream().wait_event(self.done)`" in finding.fix


def test_the_join_of_a_result_made_on_a_created_stream_is_flagged_once_at_the_wait() -> None:
    source = """
    import torch

    def forward(x):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            y = x * 2
        main = torch.cuda.default_stream()
        main.wait_stream(side)
        return y
    """
    assert findings(source) == [("CSL102", 9)]


def test_a_parameter_stream_and_an_event_recorded_on_it_are_side_streams() -> None:
    source = """
    import torch

    def finish(comm, grads):
        with torch.cuda.stream(comm):
            grads.div_(2)
            done = torch.cuda.Event()
            done.record()
        torch.cuda.default_stream().wait_event(done)
    """
    assert findings(source) == [("CSL102", 9)]


def test_the_device_generic_spelling_is_the_default_stream_too() -> None:
    source = """
    import torch
    from deepspeed.accelerator import get_accelerator

    class Optimizer:
        def has_overflow(self):
            get_accelerator().default_stream().wait_stream(self.reduce_stream)
    """
    assert findings(source) == [("CSL102", 7)]


KEPT = """
import torch

class Attention:
    def __init__(self, side):
        self.side = side
        self.main = torch.cuda.default_stream()

    def forward(self, q):
        self.main.wait_stream(self.side)
        return q * 2
{more}
"""


def test_a_default_stream_kept_on_self_in_init_is_the_default_stream_in_the_other_methods() -> None:
    assert findings(KEPT.format(more="")) == [("CSL102", 10)]


def test_a_kept_stream_another_method_rebinds_is_not_known_to_be_the_default_stream() -> None:
    more = """
    def use(self, stream):
        self.main = stream
"""
    assert findings(KEPT.format(more=more)) == []


@pytest.mark.parametrize(
    "body",
    [
        # the default stream is the current stream by construction
        """with torch.cuda.stream(torch.cuda.default_stream()):
            torch.cuda.default_stream().wait_stream(self.comm_stream)""",
        """torch.cuda.set_stream(torch.cuda.default_stream())
        torch.cuda.default_stream().wait_stream(self.comm_stream)""",
        # work of its own on the default stream, which the wait serves
        """torch.cuda.default_stream().wait_stream(self.comm_stream)
        with torch.cuda.stream(torch.cuda.default_stream()):
            self.optimizer.step()""",
        """torch.cuda.default_stream().wait_stream(self.comm_stream)
        torch.cuda.set_stream(torch.cuda.default_stream())""",
        # the caller's stream is joined too, before or after, or the host waited
        """torch.cuda.current_stream().wait_stream(self.comm_stream)
        torch.cuda.default_stream().wait_stream(self.comm_stream)""",
        """torch.cuda.default_stream().wait_stream(self.comm_stream)
        torch.cuda.current_stream().wait_stream(self.comm_stream)""",
        """torch.cuda.default_stream().wait_stream(self.comm_stream)
        self.comm_stream.synchronize()""",
        """torch.cuda.default_stream().wait_stream(self.comm_stream)
        torch.cuda.synchronize()""",
        # a fork into the default stream from the caller's, not a join
        "torch.cuda.default_stream().wait_stream(torch.cuda.current_stream())",
        "torch.cuda.default_stream().wait_event(torch.cuda.current_stream().record_event())",
        # a stream that may be the caller's
        """for stream in self.streams:
            torch.cuda.default_stream().wait_stream(stream)""",
        """stream = self.comm_stream if self.overlap else torch.cuda.current_stream()
        torch.cuda.default_stream().wait_stream(stream)""",
        # the right join
        "torch.cuda.current_stream().wait_stream(self.comm_stream)",
    ],
)
def test_a_wait_of_the_default_stream_that_is_meant_or_harmless_is_not_flagged(body: str) -> None:
    assert findings(FINISH.format(body=body)) == []


def test_a_join_of_the_callers_stream_on_one_path_only_leaves_the_default_join_flagged() -> None:
    body = """torch.cuda.default_stream().wait_stream(self.comm_stream)
        if self.strict:
            torch.cuda.current_stream().wait_stream(self.comm_stream)"""
    assert findings(FINISH.format(body=body)) == [("CSL102", 6)]


def test_work_of_its_own_on_the_default_stream_after_the_wait_is_what_the_wait_serves() -> None:
    source = """
    import torch

    def accumulate(total, x, s):
        with torch.cuda.stream(s):
            y = x * 2
        torch.cuda.default_stream().wait_stream(s)
        with torch.cuda.stream(torch.cuda.default_stream()):
            total.add_(y)
    """
    assert [line for code, line in findings(source) if code == "CSL102"] == []


def test_a_script_runs_on_the_default_stream() -> None:
    source = """
    import torch

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.ones(4, device="cuda")
    torch.cuda.default_stream().wait_stream(side)
    print(y.sum())
    """
    assert findings(source) == []


CALLED = """
import torch

comm = torch.cuda.Stream()

def finish():
    torch.cuda.default_stream().wait_stream(comm)

def step():
    {call}
"""


def test_a_helper_every_caller_enters_on_the_default_stream_is_not_flagged() -> None:
    call = """with torch.cuda.stream(torch.cuda.default_stream()):
        finish()"""
    assert findings(CALLED.format(call=call)) == []


def test_callers_outside_any_stream_block_do_not_prove_the_default_stream() -> None:
    # their own caller may run under a stream context or a graph capture
    assert findings(CALLED.format(call="finish()")) == [("CSL102", 7)]
