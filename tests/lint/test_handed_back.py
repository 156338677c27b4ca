"""A tensor handed back to the caller while a side stream may still be writing it, with no join
and no event or stream handed back with it: the caller's stream will use it before that work is
done (torchrec's staged pipeline returned its last stage's output without its event, in our own
words). Flagged at the return, unless the module's callers follow the value themselves."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.rules.missing_join import MissingJoin


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py") if f.code != "CSL201")


STAGE = """
import torch

class Stage:
    def progress(self, batch):
        with torch.cuda.stream(self.side):
            out = torch.relu(batch)
            {inside}
        {after}
        return {returned}
"""


def stage(inside: str = "pass", after: str = "pass", returned: str = "out") -> list[tuple[str, int]]:
    return findings(STAGE.format(inside=inside, after=after, returned=returned))


def test_a_result_of_a_side_stream_handed_back_with_no_join_is_flagged_at_the_return() -> None:
    assert stage() == [("CSL102", 10)]


def test_the_message_says_the_callers_stream_uses_it_before_the_side_streams_work() -> None:
    (finding,) = [
        f
        for f in lint_source(textwrap.dedent(STAGE.format(inside="pass", after="pass", returned="out")), "m.py")
        if f.code == "CSL102"
    ]
    assert "'out' was written on side stream 'self.side'" in finding.message
    assert "used on the caller's stream after 'Stage.progress' returns" in finding.message


@pytest.mark.parametrize(
    ("inside", "after", "returned"),
    [
        ("pass", "torch.cuda.current_stream().wait_stream(self.side)", "out"),  # joined
        ("done = self.side.record_event()", "pass", "out, done"),  # its event handed back with it
        ("pass", "pass", "out, self.side"),  # the stream to wait on handed back with it
        ("self.done.record(self.side)", "pass", "out"),  # recorded in an event the caller can reach
        ("pass", "self.side.synchronize()", "out"),  # the host waited
    ],
)
def test_a_result_joined_or_handed_back_with_something_to_wait_on_is_not_flagged(
    inside: str, after: str, returned: str
) -> None:
    assert stage(inside, after, returned) == []


def test_a_join_into_the_default_stream_is_flagged_once_at_the_wait_not_at_the_return() -> None:
    # the caller may run on a side stream: the default stream's wait orders nothing it does next
    assert stage(after="torch.cuda.default_stream().wait_stream(self.side)") == [("CSL102", 9)]


def test_a_stream_the_caller_passed_in_is_one_it_can_join() -> None:
    source = STAGE.replace("progress(self, batch)", "progress(self, batch, side)").replace("self.side", "side")
    assert findings(source.format(inside="pass", after="pass", returned="out")) == []


def test_nothing_to_wait_on_beside_it_is_still_flagged() -> None:
    assert stage(returned="out, None") == [("CSL102", 10)]


HELPER = """
import torch

class Stage:
    def _run(self, batch):
        with torch.cuda.stream(self.side):
            out = torch.relu(batch)
            done = self.side.record_event()
            return {made}

    def progress(self, batch):
        {call}
        {join}
        return {returned}
"""


@pytest.mark.parametrize(
    ("made", "call", "returned", "line"),
    [
        ("out", "result = self._run(batch)", "result", 14),  # followed into the caller: reported once, there
        ("out, done", "result = self._run(batch)", "result[0]", 14),  # the event dropped by the caller
        ("out, done", "result, _ = self._run(batch)", "result", 14),
    ],
)
def test_a_value_a_helper_returns_is_followed_to_the_return_that_hands_it_on(
    made: str, call: str, returned: str, line: int
) -> None:
    assert findings(HELPER.format(made=made, call=call, join="pass", returned=returned)) == [("CSL102", line)]


@pytest.mark.parametrize(
    ("made", "call", "join", "returned"),
    [
        ("out, done", "result = self._run(batch)", "pass", "result"),  # the pair, event included
        ("out", "result = self._run(batch)", "torch.cuda.current_stream().wait_stream(self.side)", "result"),
        # the event handed back beside it, waited on by the caller
        ("out, done", "result, event = self._run(batch)", "event.wait()", "result"),
        ("out, done", "result, event = self._run(batch)", "torch.cuda.current_stream().wait_event(event)", "result"),
        ("out, done", "pair = self._run(batch)", "torch.cuda.current_stream().wait_event(pair[1])", "pair[0]"),
    ],
)
def test_a_helpers_value_handed_on_with_its_event_or_joined_is_not_flagged(
    made: str, call: str, join: str, returned: str
) -> None:
    assert findings(HELPER.format(made=made, call=call, join=join, returned=returned)) == []


def test_a_use_after_waiting_on_the_event_handed_back_beside_it_is_ordered() -> None:
    source = HELPER.format(
        made="out, done", call="out, event = self._run(batch)", join="event.wait()", returned="out.sum()"
    )
    assert findings(source) == []


def test_a_function_every_caller_of_which_joins_is_left_to_them() -> None:
    source = """
    import torch

    def run(batch, stats):
        stats.calls += 1
        with torch.cuda.stream(SIDE):
            return torch.relu(batch)

    def step(batch, stats):
        out = run(batch, stats)
        torch.cuda.current_stream().wait_stream(SIDE)
        return out

    SIDE = torch.cuda.Stream()
    """
    assert findings(source) == []


def test_a_hook_nested_in_a_function_hands_its_result_to_the_framework() -> None:
    source = """
    import torch

    class Offload:
        def __init__(self):
            def pack(t):
                with torch.cuda.stream(self.side):
                    return torch.relu(t)

            self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, None)
    """
    assert findings(source) == []


def test_a_prefetcher_that_joins_before_handing_the_batch_back_is_clean() -> None:
    """The rule's own prefetcher example, handing the batch back instead of using it."""
    (prefetcher,) = [example.code for example in MissingJoin.VALID if "class Prefetcher" in example.code]
    assert "return batch.float()" in prefetcher
    handing_back = prefetcher.replace("return batch.float()", "return batch")
    assert findings(handing_back) == []
    unjoined = handing_back.replace("        torch.cuda.current_stream().wait_stream(self.stream)\n", "")
    assert findings(unjoined) == [("CSL102", 17)]


def test_a_local_bound_to_a_stream_it_cannot_tell_may_be_the_callers_own() -> None:
    """`stream = self.side if c else self.compute` with `compute` a property of unknown stream:
    the result may be on the caller's stream, and an unknown pair is no finding by itself."""
    source = STAGE.replace(
        "with torch.cuda.stream(self.side):",
        "stream = self.side if self.overlap else self.compute\n        with self._on(stream):",
    ).replace("import torch\n", "import torch\n\ndef _on(stream):\n    return torch.cuda.stream(stream)\n")
    source = source.replace("self._on(", "_on(")
    assert findings(source.format(inside="pass", after="pass", returned="out")) == []


def test_a_local_bound_to_a_new_stream_is_a_side_stream() -> None:
    source = STAGE.replace(
        "with torch.cuda.stream(self.side):", "side = torch.cuda.Stream()\n        with torch.cuda.stream(side):"
    )
    assert findings(source.format(inside="pass", after="pass", returned="out")) == [("CSL102", 11)]


PIPELINE = """
import torch

class Pipeline:
    def __init__(self, stages):
        self.stages = stages
        self.outputs = [None] * len(stages)

    def _run(self, batch: "Batch", stream: torch.cuda.Stream):
        with torch.cuda.stream(stream):
            batch.record_stream(stream)
            out = self.model(batch)
            done = torch.cuda.Event()
            done.record(stream)
            return out, done

    def _stage(self, index, batch):
        stage = self.stages[index]
        result = self._run(batch, stage.stream)
        self.outputs[index] = result

    def _advance(self):
        finished = self.outputs[0]
        self.outputs[0] = None
        {hand_back}

    def progress(self, batch):
        {take}
        for index in range(len(self.stages)):
            self._stage(index, batch)
        return output
"""


def test_a_result_kept_with_its_event_in_a_list_on_self_and_handed_back_without_it_is_flagged() -> None:
    """A batch of unknown type on which `record_stream` is called holds tensors; its stage's
    result goes through `self.outputs` to another method, which drops the event."""
    source = PIPELINE.format(hand_back="return finished[0]", take="output = self._advance()")
    assert findings(source) == [("CSL102", 25)]


def test_the_pair_handed_on_whole_and_waited_on_by_the_caller_is_not_flagged() -> None:
    take = (
        "pair = self._advance()\n        output, done = pair\n        done.wait()\n"
        "        output.record_stream(torch.cuda.current_stream())"
    )
    assert findings(PIPELINE.format(hand_back="return finished", take=take)) == []
