"""A tensor made on a side stream, handed to the caller and also kept in a container on `self`
whose entry the class drops later (`del self.c[k]`, `self.c.pop(k)`): the entry is no keep-alive
for the caller, who may hold the tensor, or a view of it, past the drop and then release it on
its own stream while its kernels still read it (CSL201), unless the class records the caller's
stream on the tensor (on any path: a conditional record protects)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.analysis.assumptions import CONTAINER_HANDOVER, Assumptions
from csan_lint.lint.engine import lint_source

ON = Assumptions.from_switches([(CONTAINER_HANDOVER, True)])
"""The detector is off by default (docs/analysis.md); these tests run it."""


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py", assumptions=ON))


RELOADER = """
import torch

class Reloader:
    def __init__(self):
        self.copy = torch.cuda.Stream()
        self.kept = {{}}
        self.done = {{}}

    def unpack(self, key, cpu):
        with torch.cuda.stream(self.copy):
            gpu = cpu.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.copy)
        self.kept[key] = gpu
        {after_store}
        return gpu

    def node_done(self, key):
        self.done[key] = torch.cuda.current_stream().record_event()
        {in_hook}

    def release(self, key):
        self.copy.wait_event(self.done[key])
        {drop}
"""


def reloader(after_store: str = "pass", in_hook: str = "pass", drop: str = "del self.kept[key]") -> str:
    return RELOADER.format(after_store=after_store, in_hook=in_hook, drop=drop)


@pytest.mark.parametrize("drop", ["del self.kept[key]", "self.kept.pop(key)", "self.kept.clear()"])
def test_a_handed_over_tensor_whose_stash_entry_is_dropped_is_flagged_where_it_is_made(drop: str) -> None:
    found = lint_source(textwrap.dedent(reloader(drop=drop)), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found] == [("CSL201", 12)]
    assert "'gpu' was allocated on side stream 'self.copy'" in found[0].message
    assert "its removal from 'self.kept' at line 24" in found[0].message


@pytest.mark.parametrize(
    ("after_store", "in_hook"),
    [
        ("gpu.record_stream(torch.cuda.current_stream())", "pass"),
        # a record on a branch, of the item read back in another method, protects the stash
        ("pass", "if self.shared:\n            self.kept[key].record_stream(torch.cuda.current_stream())"),
        (
            "pass",
            "t = self.kept[key]\n        if self.shared:\n            t.record_stream(torch.cuda.current_stream())",
        ),
    ],
)
def test_a_stash_the_class_records_on_the_callers_stream_is_not_flagged(after_store: str, in_hook: str) -> None:
    assert findings(reloader(after_store=after_store, in_hook=in_hook)) == []


def test_a_view_handed_over_and_a_stash_emptied_by_rebinding_are_flagged() -> None:
    source = reloader(drop="self.kept = {}").replace("        return gpu\n", "        return gpu.view(-1)[0]\n")
    found = lint_source(textwrap.dedent(source), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found] == [("CSL201", 12)]
    assert "its removal from 'self.kept' at line 24" in found[0].message


def test_a_tensor_stashed_in_a_tuple_beside_its_event_is_flagged() -> None:
    source = reloader().replace("self.kept[key] = gpu", "self.kept[key] = (gpu, self.copy.record_event())")
    assert findings(source) == [("CSL201", 12)]


def test_a_side_stream_that_waits_for_the_callers_stream_before_allocating_is_not_flagged() -> None:
    waits = "        self.copy.wait_stream(torch.cuda.current_stream())\n        with torch.cuda.stream(self.copy):"
    assert findings(reloader().replace("        with torch.cuda.stream(self.copy):", waits)) == []


def test_a_stash_never_dropped_keeps_the_tensor_alive_and_is_not_flagged() -> None:
    assert findings(reloader(drop="pass")) == []


def test_a_stashed_tensor_not_handed_over_is_not_flagged() -> None:
    source = reloader().replace("        return gpu\n", "")
    assert findings(source) == []


def test_a_stash_of_another_container_dropped_does_not_count() -> None:
    assert findings(reloader(drop="del self.done[key]")) == []


HOOKS = """
import torch

class Offloader:
    def __init__(self):
        self.copy = torch.cuda.Stream()
        self.stash = {}

        def unpack(key, cpu):
            with torch.cuda.stream(self.copy):
                gpu = cpu.to("cuda", non_blocking=True)
            torch.cuda.current_stream().wait_stream(self.copy)
            self.stash[key] = gpu

            def hook(outputs):
                event = torch.cuda.current_stream().record_event()
                self.copy.wait_event(event)
                del self.stash[key]
                return outputs

            register(hook)
            return gpu

        self.hooks = (unpack,)
"""


def test_closures_over_self_in_nested_hooks_are_followed() -> None:
    found = lint_source(textwrap.dedent(HOOKS), "m.py", assumptions=ON)
    assert [(f.code, f.line) for f in found] == [("CSL201", 11)]
    assert "its removal from 'self.stash' at line 18" in found[0].message


def test_a_conditional_record_in_the_nested_hook_protects() -> None:
    recorded = HOOKS.replace(
        "                del self.stash[key]\n",
        "                kept = self.stash[key]\n"
        "                if any(o is kept for o in outputs):\n"
        "                    kept.record_stream(torch.cuda.current_stream())\n"
        "                del self.stash[key]\n",
    )
    assert findings(recorded) == []


QUEUE = """
import torch

class Prefetcher:
    def __init__(self):
        self.copy = torch.cuda.Stream()
        self.ready = {}

    def prefetch(self, key, cpu):
        with torch.cuda.stream(self.copy):
            gpu = cpu.to("cuda", non_blocking=True)
        self.ready[key] = (gpu, self.copy.record_event())

    def take(self, key):
        return self.ready.pop(key)
"""


def test_a_tuple_kept_on_self_and_handed_out_by_another_method_is_flagged() -> None:
    found = lint_source(textwrap.dedent(QUEUE), "m.py", assumptions=ON)
    assert [f.line for f in found if f.code == "CSL201"] == [11]  # (CSL103: `cpu` read on the side stream)
    assert findings(QUEUE.replace("(gpu, self.copy.record_event())", "(1, self.copy.record_event())")) == [
        ("CSL103", 11)
    ]


@pytest.mark.parametrize("recorded", ["self.kept[0]", "self.kept[key].view(-1)"])
def test_a_record_of_a_literal_item_or_a_view_of_an_item_protects_the_stash(recorded: str) -> None:
    in_hook = f"{recorded}.record_stream(torch.cuda.current_stream())"
    assert findings(reloader(in_hook=in_hook)) == []
