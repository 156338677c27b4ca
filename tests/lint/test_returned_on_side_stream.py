"""A value a called function computes and returns inside its own stream block is written on that
stream: the caller's read on another stream must wait for it (torchrec's semi-sync pipeline ran
the forward on one side stream and the backward from another, in our own words)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

PIPELINE = """
import torch

class Pipeline:
    def _forward(self, batch):
        with torch.cuda.stream(self.compute):
            {produce}

    def progress(self, batch):
        losses, output = self._forward(batch)
        {before}
        with torch.cuda.stream({consumer}):
            torch.sum(losses, dim=0).backward()
        torch.cuda.current_stream().wait_stream(self.compute)  # the output goes back joined
        return output
"""


JOINED = "out = self.model(batch)\n        torch.cuda.current_stream().wait_stream(self.compute)\n        return out"


def source(produce: str = "return self.model(batch)", before: str = "pass", consumer: str = "self.backward") -> str:
    return textwrap.dedent(PIPELINE.format(produce=produce, before=before, consumer=consumer))


def findings(produce: str = "return self.model(batch)", before: str = "pass", consumer: str = "self.backward") -> list:
    return sorted((f.code, f.line) for f in lint_source(source(produce, before, consumer), "m.py"))


def test_a_read_on_another_stream_of_what_a_method_returned_from_its_stream_block_is_flagged() -> None:
    assert [line for _, line in findings()] == [13]


def test_the_message_names_both_streams() -> None:
    (finding,) = lint_source(source(), "m.py")
    assert "'losses'" in finding.message
    assert "side stream 'self.compute'" in finding.message
    assert "side stream 'self.backward'" in finding.message


@pytest.mark.parametrize(
    ("produce", "before", "consumer"),
    [
        ("return self.model(batch)", "pass", "self.compute"),  # read on the producing stream: the fix
        ("return self.model(batch)", "self.backward.wait_stream(self.compute)", "self.backward"),
        (JOINED, "pass", "torch.cuda.current_stream()"),  # joined before returning, read on the caller's stream
    ],
)
def test_a_read_ordered_after_the_producing_stream_is_not_flagged(produce: str, before: str, consumer: str) -> None:
    assert findings(produce, before, consumer) == []


def test_each_name_of_a_returned_tuple_gets_its_own_item() -> None:
    """Only the tensor made on the side stream is written there: the stream handed back beside it
    is no tensor (FSDP's `foreach_reduce` returns its post-reduce stream and events)."""
    source = """
    import torch

    class Reducer:
        def _reduce(self, grads):
            with torch.cuda.stream(self.side):
                out = torch.cat(grads)
                return out, self.side

        def step(self, grads):
            out, stream = self._reduce(grads)
            self.events[stream] = None
            return out.sum()
    """
    found = lint_source(textwrap.dedent(source), "m.py")
    assert sorted((f.code, f.line) for f in found if f.code != "CSL201") == [("CSL102", 13)]  # not line 12
