"""Facts from runs recorded in process on the emulated device (runtime/facts_mode.py,
runtime/facts_recorder.py): which calls count as new, what each argument's last write is
relative to the entry stream, and a recording failure that must not reach the user's program.
The pytest plugin's `--csan-facts` and the static pass are tested end to end in
tests/confirm/test_facts.py."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import pytest
import torch

from csan_lint.runtime import sanitize
from csan_lint.runtime.facts_mode import record_facts
from csan_lint.runtime.facts_recorder import FactsRecorder
from csan_lint.runtime.sanitizer import CsanInternalWarning

HELPERS = """\
import torch


def scale(x, factor):
    return x * factor


def staged(host):
    return host.to("cuda", non_blocking=True)


def on_side(x, side):
    with side:
        return x * 2
"""


@pytest.fixture
def helpers(tmp_path, monkeypatch):
    """A module of the user's that is not a test file, imported from its own file."""
    (tmp_path / "facts_helpers.py").write_text(HELPERS)
    spec = importlib.util.spec_from_file_location("facts_helpers", tmp_path / "facts_helpers.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "facts_helpers", module)
    spec.loader.exec_module(module)
    return module


def contexts(recorder: FactsRecorder, qualname: str) -> list[dict]:
    (entry,) = [entry for entry in recorder.entries() if entry["qualname"] == qualname]
    assert entry["module"] == "facts_helpers"
    return [{key: context[key] for key in ("entry", "arguments")} for context in entry["contexts"]]


def argument(written: str, device: str = "cuda") -> list[dict]:
    return [{"name": "x", "written": written, "device": device}]


def test_each_call_is_seen_with_its_argument_s_last_write_relative_to_the_entry_stream(helpers):
    with sanitize(device="emulated") as sanitizer:
        recorder = record_facts(sanitizer)
        recorder.test = "t.py::one"
        side = torch.cuda.Stream()
        x = torch.ones(8, device="cuda") + 1  # written on the default stream
        for _ in range(3):
            helpers.scale(x, 2)  # the same tensor again: the same context, once
        fresh = torch.empty(8, device="cuda")  # allocated, never written
        helpers.scale(fresh, 2)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            helpers.scale(x, 3)  # entered on the side stream, x written on the default one
            y = x + 1
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.stream(side):
            helpers.scale(y, 3)  # y last written on this same side stream
        helpers.scale(torch.ones(8), 2)  # a host tensor
    assert sorted(map(str, contexts(recorder, "scale"))) == sorted(
        map(
            str,
            [
                {"entry": "default", "arguments": argument("same")},
                {"entry": "default", "arguments": argument("never")},
                {"entry": "side", "arguments": argument("other")},
                {"entry": "side", "arguments": argument("same")},
                {"entry": "default", "arguments": argument("never", "cpu")},
            ],
        )
    )
    (entry,) = [entry for entry in recorder.entries() if entry["qualname"] == "scale"]
    assert all(context["tests"] == ["t.py::one"] for context in entry["contexts"])


@pytest.mark.parametrize(
    "make", [lambda: torch.cuda.Stream(), lambda: torch.Stream("cuda")], ids=["cuda.Stream", "Stream"]
)
def test_a_function_that_enters_a_stream_object_first_is_seen_entered_on_its_caller_s_stream(helpers, make):
    """`with side:` (a stream as its own context, torch >= 2.7) switches streams without
    `torch.cuda.set_stream`: the switch is still seen before it happens."""
    with sanitize(device="emulated") as sanitizer:
        recorder = record_facts(sanitizer)
        side = make()
        x = torch.ones(8, device="cuda") + 1
        side.wait_stream(torch.cuda.current_stream())
        helpers.on_side(x, side)
        torch.cuda.current_stream().wait_stream(side)
    assert contexts(recorder, "on_side") == [{"entry": "default", "arguments": argument("same")}]


def test_a_copy_is_recorded_for_the_function_that_issued_it(helpers):
    with sanitize(device="emulated") as sanitizer:
        recorder = record_facts(sanitizer)
        helpers.staged(torch.ones(8).pin_memory())
        torch.cuda.synchronize()
    (entry,) = [entry for entry in recorder.entries() if entry["qualname"] == "staged"]
    assert entry["copies"] == [{"direction": "h2d", "non_blocking": True, "tests": []}]
    assert entry["contexts"][0]["arguments"] == [{"name": "host", "written": "never", "device": "pinned"}]


def test_a_recording_failure_is_an_internal_error_not_the_user_s(helpers, monkeypatch):
    def broken(self, *args):
        raise RuntimeError("recorder bug")

    with warnings.catch_warnings(record=True) as caught, sanitize(device="emulated") as sanitizer:
        warnings.simplefilter("always")
        recorder = record_facts(sanitizer)
        monkeypatch.setattr(FactsRecorder, "entered", broken)
        x = torch.ones(8, device="cuda")
        again = helpers.scale(helpers.scale(x, 2), 2)
        assert again.sum().item() == 32
        assert sanitizer.facts.broken
    internal = [str(w.message) for w in caught if w.category is CsanInternalWarning]
    assert len(internal) == 1
    assert internal[0].startswith("csan: internal error, checking is off from here: RuntimeError: recorder bug")
    assert [error.split(" at ")[0] for error in sanitizer.internal_errors] == ["RuntimeError: recorder bug"]
    assert recorder.entries() == []
