"""`csan-lint --replay TRACE --format chrome`: a run on the emulated device, drawn as a Chrome
Trace Event Format document, checked against the format's documented fields."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from csan_lint.runtime.chrome import CATEGORIES, from_trace
from csan_lint.runtime.replay import main as replay_main

torch = pytest.importorskip("torch")

PROGRAM = """\
import torch

side = torch.cuda.Stream()
a = torch.ones(4, device="cuda") * 2
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    b = a + 1
torch.cuda.current_stream().wait_stream(side)
c = b * 3
with torch.cuda.stream(side):
    d = c - 1
side.synchronize()
done = torch.cuda.Event()
done.record(side)
done.query()
torch.cuda.synchronize()
"""
RACE_LINE = 11  # `d = c - 1` reads `c` on `side` with no wait after `c = b * 3` (line 9)

PHASES = {"X", "i", "s", "t", "f", "M", "B", "E", "C", "b", "e", "n"}
"""The phases of the Trace Event Format (Google's "Trace Event Format" document)."""


def check_trace_event_format(document: Any) -> None:
    """The JSON Object Format and each phase's required fields, as the format's document lists
    them; flows whose ids pair up and bind to a slice of their track (and, for Chrome DevTools,
    to an event of their own category at their `ts`); per track, slices in order of `ts` that
    nest or follow, never half-overlap; every track named."""
    assert isinstance(document, dict) and isinstance(document["traceEvents"], list)
    named: set[tuple[int, int]] = set()
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[tuple[str, Any], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for event in document["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["name"], str) and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        track = (event["pid"], event["tid"])
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name", "thread_sort_index", "process_sort_index"}
            key = "sort_index" if event["name"].endswith("sort_index") else "name"
            assert key in event["args"], event
            if event["name"] == "thread_name":
                named.add(track)
            continue
        assert isinstance(event["ts"], int | float) and event["ts"] >= 0, event
        assert isinstance(event.get("cat", ""), str)
        if event["ph"] == "X":
            assert isinstance(event["dur"], int | float) and event["dur"] >= 0
            slices[track].append((event["ts"], event["ts"] + event["dur"]))
        elif event["ph"] == "i":
            assert event.get("s", "t") in {"g", "p", "t"}
        elif event["ph"] in {"s", "t", "f"}:
            assert "id" in event and "cat" in event, event
            assert event["ph"] != "f" or event.get("bp", "e") == "e"
            flows[(event["cat"], event["id"])][event["ph"]].append(event)
    categorized = {
        (e["pid"], e["tid"], e["ts"], e.get("cat")) for e in document["traceEvents"] if e["ph"] in {"X", "i"}
    }
    for track, spans in slices.items():
        assert track in named, f"track {track} has no thread_name"
        assert [start for start, _ in spans] == sorted(start for start, _ in spans), f"ts goes back on {track}"
        for (_, end), (next_start, next_end) in zip(spans, spans[1:], strict=False):
            assert next_start >= end or next_end <= end, f"slices half-overlap on {track}"
    for key, phases in flows.items():
        assert len(phases["s"]) == 1 and len(phases["f"]) == 1, f"flow {key} does not pair up: {dict(phases)}"
        start, finish = phases["s"][0], phases["f"][0]
        assert start["ts"] <= finish["ts"]
        for end in (start, finish):
            spans = slices[(end["pid"], end["tid"])]
            assert any(a <= end["ts"] <= b for a, b in spans), f"flow {key} binds to no slice: {end}"
            # Chrome DevTools binds a flow end only to an event of the flow's category at its ts
            assert (end["pid"], end["tid"], end["ts"], end["cat"]) in categorized, f"DevTools drops flow {key}"


@pytest.fixture
def picture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The chrome document `csan-lint --replay run.jsonl --format chrome` prints for PROGRAM."""
    from csan_lint.runtime.__main__ import main as run_main

    script = tmp_path / "offload.py"
    script.write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["offload.py"])
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    assert run_main(["--device", "emulated", "--trace-out", "run.jsonl", "offload.py"]) == 1
    capsys.readouterr()
    assert replay_main("run.jsonl", "chrome", quiet=True) == 1
    return json.loads(capsys.readouterr().out)


def _by_phase(document: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    return [event for event in document["traceEvents"] if event["ph"] == phase]


def test_the_picture_follows_the_trace_event_format(picture):
    check_trace_event_format(picture)
    assert {event.get("cat") for event in picture["traceEvents"] if "cat" in event} <= set(CATEGORIES)


def test_one_track_per_stream_named_by_where_it_was_made(picture):
    names = {event["tid"]: event["args"]["name"] for event in _by_phase(picture, "M") if event["name"] == "thread_name"}
    assert sorted(names.values()) == ["host", "stream created at offload.py:3 (side)", "the default stream"]
    kernels = [event for event in _by_phase(picture, "X") if event["cat"] == "kernel"]
    side = next(tid for tid, name in names.items() if name.startswith("stream created"))
    assert [k["name"] for k in kernels if k["tid"] == side] == ["aten::add.Tensor", "aten::sub.Tensor"]
    assert all(k["args"]["frame"].endswith(f"offload.py:{line}") for k, line in zip(
        [k for k in kernels if k["tid"] == side], (7, RACE_LINE), strict=True
    ))  # fmt: skip


def test_waits_are_arrows_from_the_record_to_the_wait(picture):
    sync = [event for event in picture["traceEvents"] if event["ph"] in "sf" and event["cat"] == "sync"]
    waits = [event for event in sync if event["ph"] == "f"]
    records = {event["id"]: event for event in sync if event["ph"] == "s"}
    names = {event["tid"]: event["args"]["name"] for event in _by_phase(picture, "M") if event["name"] == "thread_name"}
    arrows = {(names[records[w["id"]]["tid"]], names[w["tid"]]) for w in waits}
    side = "stream created at offload.py:3 (side)"
    assert ("the default stream", side) in arrows and (side, "the default stream") in arrows
    # events are named by where CUDA made them, their first record (inside `wait_stream`)
    assert {w["name"] for w in waits} >= {"event created at offload.py:5", "event created at offload.py:8"}


def test_the_race_is_a_marked_pair(picture):
    marks = [event for event in _by_phase(picture, "i") if event["cat"] == "race"]
    assert {m["args"]["access"] for m in marks} == {"current", "previous"}
    assert {m["name"] for m in marks} == {"read-after-write"}
    arrows = [event for event in picture["traceEvents"] if event["ph"] in "sf" and event["cat"] == "race"]
    start, finish = sorted(arrows, key=lambda event: event["ph"], reverse=True)
    kernels = {(k["tid"], k["ts"]): k for k in _by_phase(picture, "X")}
    assert kernels[(start["tid"], start["ts"])]["name"] == "aten::mul.Tensor"
    assert kernels[(finish["tid"], finish["ts"])]["args"]["frame"].endswith(f"offload.py:{RACE_LINE}")
    assert picture["otherData"]["races"] == 1


def test_a_bad_trace_is_an_error_not_a_picture(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "csan-trace", "version": 2}\n{"event": "nope"}\n')
    assert replay_main(str(bad), "chrome") == 2
    assert "bad.jsonl:2: unknown event 'nope'" in capsys.readouterr().err


def test_from_trace_is_the_same_picture(picture, tmp_path):
    drawn = from_trace(tmp_path / "run.jsonl").document()
    assert drawn["traceEvents"] == picture["traceEvents"]


TEST_FILE = """\
import torch


def test_offload():
    side = torch.cuda.Stream()
    a = torch.ones(4, device="cuda") * 2
    with torch.cuda.stream(side):
        b = a + 1
    del a
    c = torch.ones(4, device="cuda")  # the default stream may get a's block while side still reads it
"""


@pytest.mark.parametrize("name", ["run.json", "run.jsonl"])
def test_pytest_csan_trace_out_draws_the_session(tmp_path, name):
    import subprocess
    import sys

    (tmp_path / "test_offload.py").write_text(TEST_FILE)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--csan", "--csan-device=emulated",
        "--csan-report-only", f"--csan-trace-out={name}", "test_offload.py",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    if name.endswith(".jsonl"):  # the trace itself, which --replay reads and draws
        document = from_trace(tmp_path / name).document()
    else:
        document = json.loads((tmp_path / name).read_text())
        assert not list(tmp_path.glob("*.part.jsonl"))
    check_trace_event_format(document)
    marks = [event for event in _by_phase(document, "i") if event["cat"] == "race"]
    assert {m["name"] for m in marks} == {"read-after-write", "free-in-use"}
    names = {event["args"]["name"] for event in _by_phase(document, "M") if event["name"] == "thread_name"}
    assert "stream created at test_offload.py:5 (side)" in names


def test_confirm_trace_out_draws_the_sanitized_run(tmp_path):
    """`csan-lint --confirm --trace-out FILE` on a copy of tests/confirm/unflagged_project."""
    import shutil
    import subprocess
    import sys

    project = tmp_path / "up"
    shutil.copytree(Path(__file__).parents[1] / "confirm" / "unflagged_project", project)
    command = [
        sys.executable, "-m", "csan_lint", "app", "--confirm", "--device=emulated", "--no-cache",
        "--trace-out=run.json", "-q",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # its races are real
    document = json.loads((project / "run.json").read_text())
    check_trace_event_format(document)
    races = {event["name"] for event in _by_phase(document, "i") if event["cat"] == "race"}
    assert {"read-after-write", "unjoined-capture-fork"} <= races
    names = {event["args"]["name"] for event in _by_phase(document, "M") if event["name"] == "thread_name"}
    assert "stream created at offload.py:11 (self.stream)" in names
