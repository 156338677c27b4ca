"""A function that makes a stream wait on an event it reads from an object (`s.wait_event(b.ready)`)
says the object's tensors were made on the stream that recorded the event: used on the waiting
stream with no `record_stream`, they are a CSL201 finding at their first use there
(lint/carried.py)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.assumptions import EVENT_CARRIED, Assumptions
from csan_lint.lint.analysis.uses import module_uses
from csan_lint.lint.engine import lint_source
from csan_lint.lint.names import ImportTable
from csan_lint.lint.scan import scan

ON = Assumptions.from_switches([(EVENT_CARRIED, True)])
"""The detector is off by default (docs/analysis.md); these tests run it."""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py", assumptions=ON))


LOOP = """
import torch

class Worker:
    async def consume(self, queue):
        with torch.cuda.stream(self.stream):
            while True:
                batch = await queue.get()
                ready = batch.pop("ready", None)
                if ready is not None:
                    self.stream.wait_event(ready.event)
{more}
                await self.step(**batch)
"""


def loop(more: str = "") -> str:
    return LOOP.format(more=more)


def test_a_batch_taken_with_its_event_and_run_on_the_waiting_stream_is_flagged_at_its_use() -> None:
    found = lint_source(textwrap.dedent(loop()), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found] == [("CSL201", 13)]
    assert "'batch' came with the event 'ready.event' that stream 'self.stream' waits on at line 11" in found[0].message
    assert found[0].fix is not None and "record_stream(self.stream)" in found[0].fix


ITEM = """
import torch

def take(queue, model):
    item = queue.get()
    torch.cuda.current_stream().wait_event(item.event)
{more}
    return model({use})
"""


@pytest.mark.parametrize("use", ["item.x", "item['x']", "item.get('x')", "item.x * 2"])
def test_an_item_read_from_the_events_holder_and_used_like_a_tensor_is_flagged(use: str) -> None:
    assert findings(ITEM.format(use=use, more="")) == [("CSL201", 8)]


def test_the_event_waited_through_its_own_wait_method_is_evidence_too() -> None:
    source = ITEM.format(use="item.x", more="").replace(
        "torch.cuda.current_stream().wait_event(item.event)", "item.event.wait(torch.cuda.current_stream())"
    )
    assert findings(source) == [("CSL201", 8)]


@pytest.mark.parametrize(
    "more",
    [
        "                for t in batch.values():\n                    t.record_stream(self.stream)",
        "                batch['x'].record_stream(self.stream)",
        "                keep_for(batch, self.stream)",
        "                self.stream.synchronize()",
        "                self.copy_stream.wait_stream(self.stream)",
    ],
)
def test_a_batch_recorded_handed_with_the_stream_or_joined_is_not_flagged(more: str) -> None:
    assert findings(loop(more)) == []


def test_a_batch_handed_to_a_recorder_of_the_module_is_not_flagged() -> None:
    recorder = "\n\ndef keep(batch, stream):\n    for value in batch.values():\n        value.record_stream(stream)\n"
    assert findings(loop("                keep(batch)") + recorder) == []


@pytest.mark.parametrize(
    "more",
    [
        "    item.x.record_stream(torch.cuda.current_stream())",
        "    self_kept = Transfer(item)",
        "    pending.append(item)",
        "    return item",
    ],
)
def test_an_item_recorded_or_a_holder_that_escapes_is_not_flagged(more: str) -> None:
    assert findings(ITEM.format(use="item.x", more=more)) == []


@pytest.mark.parametrize(
    ("binding", "wait"),
    [
        ("item = {'x': torch.ones(2, device='cuda'), 'event': make_event()}", "item['event']"),
        ("item = Batch(torch.ones(2, device='cuda'), make_event())", "item.event"),
        ("item = queue.get()", "self.event"),
    ],
)
def test_an_event_of_an_object_made_here_or_of_self_is_no_evidence(binding: str, wait: str) -> None:
    source = f"""
    import torch

    def take(self, queue, model):
        {binding}
        torch.cuda.current_stream().wait_event({wait})
        return model(item.x)
    """
    assert findings(source) == []


def test_a_use_before_the_wait_or_off_the_waiting_stream_is_not_flagged() -> None:
    source = """
    import torch

    def take(queue, model, side):
        item = queue.get()
        y = model(item.x)
        side.wait_event(item.event)
        return y
    """
    assert findings(source) == []


UNPACKED = """
import torch

def take(queue, model):
    x, ready = {value}
    torch.cuda.current_stream().wait_event(ready)
{more}
    return model(x)
"""


def test_a_tensor_unpacked_beside_the_event_is_flagged_at_its_use() -> None:
    assert findings(UNPACKED.format(value="queue.get()", more="")) == [("CSL201", 8)]


@pytest.mark.parametrize(
    ("value", "more"),
    [
        ("queue.get()", "    x.record_stream(torch.cuda.current_stream())"),
        ("queue.get()", "    pending.append(x)"),
        ("torch.ones(2, device='cuda'), make_event()", ""),
    ],
)
def test_an_unpacked_tensor_recorded_kept_or_made_here_is_not_flagged(value: str, more: str) -> None:
    assert findings(UNPACKED.format(value=value, more=more)) == []


def test_a_container_unpacked_beside_the_event_is_no_tensor() -> None:
    more = "    for n, p in zip(x, params):\n        p.resize(n)"
    assert findings(UNPACKED.format(value="queue.get()", more=more).replace("return model(x)", "return p")) == []


@pytest.mark.parametrize(
    ("header", "binding", "event", "tensor"),
    [
        ("def take(item, model):", "pass", "item.event", "item.x"),
        ("def take(items, model):", "for item in items: pass", "item.event", "item.x"),
        ("def take(pair, model):", "x, event = pair", "event", "x"),
    ],
)
def test_an_event_of_the_callers_object_is_no_evidence(header: str, binding: str, event: str, tensor: str) -> None:
    # the caller holds the object, and may keep its tensors alive until the wait is done
    source = f"""
    import torch

    {header}
        {binding}
        torch.cuda.current_stream().wait_event({event})
        return model({tensor})
    """
    assert findings(source) == []


def waiters(source: str) -> frozenset[str]:
    """The functions whose own code waits on an event: the ones lint/carried.py walks."""
    module = cst.parse_module(textwrap.dedent(source))
    imports, functions = ImportTable(), []
    scan(module.body, imports, functions, "", {}, [])
    return module_uses(module, imports, functions).functions(api.WAIT_EVENT)


def test_the_functions_walked_are_those_whose_code_waits_on_an_event() -> None:
    source = """
        import torch

        def own(self):
            self.stream.wait_event(self.ready)

        def timed(work):
            work.wait(timeout=5)

        def handle(work):
            work.wait()

        def commented(queue):
            # torch.cuda.current_stream().wait_event(ready); ready.wait(stream)
            x, ready = queue.get()
            return "s.wait_event(ready)"

        def popped(queue):
            batch = queue.get()
            for t in batch:
                batch.pop("ready").wait(torch.cuda.current_stream())
        """
    assert waiters(source) == {"own", "popped"}


def test_a_wait_in_a_function_with_a_wrapped_signature_or_at_module_level() -> None:
    source = """
        import torch

        def wrapped(
            queue,
        ) -> None:
            x, ready = queue.get()
            torch.cuda.current_stream().wait_event(ready)

        x, ready = queue.get()
        torch.cuda.current_stream().wait_event(ready)
        """
    assert waiters(source) == {"wrapped"}
