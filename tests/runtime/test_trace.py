"""Trace format: writing then replaying gives the same reports; bad traces fail located."""

from __future__ import annotations

import inspect
import io
import json
from pathlib import Path

import pytest

from csan_lint.runtime.events import Access
from csan_lint.runtime.replay import main as replay_main
from csan_lint.runtime.report import render_text, to_json
from csan_lint.runtime.stacks import capture_stack
from csan_lint.runtime.trace import EVENTS, HEADER, TraceError, TraceWriter, replay
from csan_lint.runtime.tracker import Tracker

S0, S1, S2 = 0, 1001, 1002


def _run(t) -> None:
    """A run touching every event kind, with several races."""
    t.stream_created(S1)
    t.stream_created(S2)
    t.event_created(1)
    t.allocated(0x1000, 512, S0, capture_stack())
    t.kernel_launched(S0, "fill_", [Access(0x1000, 512, True, "self", True)], capture_stack())
    t.event_recorded(1, S0)
    t.event_waited(1, S1, capture_stack())
    t.kernel_launched(
        S1, "mul", [Access(0x1000, 256, False, "self"), Access(0x1100, 256, False, "other")], capture_stack()
    )
    t.kernel_launched(S2, "add_", [Access(0x1100, 64, True, "self")], capture_stack())  # WAR + WAW
    t.stream_recorded(0x1000, S2)
    t.stream_queried(S2, False)
    t.event_queried(1, True)
    t.freed(0x1000, capture_stack())  # S1 not covered...
    t.allocated(0x1000, 256, S0, capture_stack())  # ...and the block is reused: free-in-use
    t.allocated(0x9000, 128, None)  # pinned host memory
    t.kernel_launched(S1, "copy_", [Access(0x9000, 64, True, "self")], capture_stack())
    t.host_accessed(0x9000, 64, False, "tolist", capture_stack())
    t.freed(0x9000)
    t.event_created(2)
    t.event_waited(2, S2, capture_stack())
    t.capture_began(S0, capture_stack())
    t.capture_began(S1, capture_stack())
    t.kernel_launched(S2, "relu", [], capture_stack())
    t.capture_ended(S1, capture_stack())
    t.stream_synchronized(S1)
    t.event_synchronized(1)
    t.device_synchronized()
    t.event_deleted(1)


def test_round_trip_gives_identical_reports(tmp_path):
    path = tmp_path / "run.jsonl"
    with TraceWriter(Tracker(), path) as writer:
        _run(writer)
        live = writer.errors
    assert len({e.kind for e in live}) >= 7
    replayed = Tracker()
    replay(path, replayed)
    assert [to_json(e) for e in replayed.errors] == [to_json(e) for e in live]
    assert [render_text(e) for e in replayed.errors] == [render_text(e) for e in live]


def test_writer_output_is_json_lines_with_header(tmp_path):
    path = tmp_path / "run.jsonl"
    with TraceWriter(None, path) as writer:
        writer.kernel_launched(S1, "mul", [Access(16, 8, False, "self")], stack=None)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        HEADER,
        {
            "event": "kernel_launched",
            "stream": S1,
            "operator": "mul",
            "accesses": [{"ptr": 16, "size": 8, "is_write": False, "argument": "self", "is_output": False}],
            "stack": None,
        },
    ]


def test_version_2_carries_layouts_and_blocking_streams_and_replays_them(tmp_path):
    path = tmp_path / "run.jsonl"
    left = Access(0x1000, 84, True, "self", True, (4, (4, 3), (6, 1)))
    right = left._replace(ptr=0x100C)
    with TraceWriter(Tracker(), path) as writer:
        writer.stream_created(S1, blocking=True)
        writer.stream_created(S2)
        writer.kernel_launched(S0, "fill_", [Access(0x2000, 64, True, "self")])
        writer.kernel_launched(S1, "mul_", [left, Access(0x2000, 64, False, "other")])  # ordered: blocking
        writer.kernel_launched(S2, "add_", [right])  # disjoint columns
        writer.kernel_launched(S2, "sum", [Access(0x1000, 96, False, "self")])  # races mul_ only
        live = [to_json(e) for e in writer.errors]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"format": "csan-trace", "version": 2}
    assert lines[1] == {"event": "stream_created", "stream": S1, "blocking": True, "stack": None}
    assert lines[2] == {"event": "stream_created", "stream": S2, "stack": None}
    assert lines[4]["accesses"][0] == {
        "ptr": 0x1000,
        "size": 84,
        "is_write": True,
        "argument": "self",
        "is_output": True,
        "element_size": 4,
        "sizes": [4, 3],
        "strides": [6, 1],
    }
    replayed = Tracker()
    replay(path, replayed)
    assert [to_json(e) for e in replayed.errors] == live
    assert [(e["kind"], e["current"]["operator"], e["previous"]["operator"]) for e in live] == [
        ("read-after-write", "sum", "mul_")
    ]


def test_an_access_may_list_its_extents(tmp_path):
    allocated = json.dumps({"event": "allocated", "ptr": 0x1000, "size": 256, "stream": None})
    launch = {
        "event": "kernel_launched",
        "stream": S1,
        "operator": "w",
        "accesses": [{"extents": [[0x1000, 16], [0x1040, 16]], "is_write": True, "argument": "self"}],
    }
    for size, found in ((0x30, []), (0x40, [("read-after-write", "w")])):  # the gap; then into the second
        read = {
            "event": "kernel_launched",
            "stream": S2,
            "operator": "r",
            "accesses": [{"ptr": 0x1010, "size": size, "is_write": False}],
        }
        tracker = Tracker()
        replay(_trace(tmp_path, GOOD, allocated, json.dumps(launch), json.dumps(read)), tracker)
        assert [(e.kind, e.previous.operator) for e in tracker.errors] == found


def test_version_1_traces_still_read(tmp_path):
    path = _trace(
        tmp_path,
        '{"format": "csan-trace", "version": 1}',
        '{"event": "stream_created", "stream": 1001}',
        '{"event": "kernel_launched", "stream": 0, "operator": "fill_",'
        ' "accesses": [{"ptr": 16, "size": 8, "is_write": true}]}',
        '{"event": "kernel_launched", "stream": 1001, "operator": "mul",'
        ' "accesses": [{"ptr": 16, "size": 8, "is_write": false}]}',
    )
    tracker = Tracker()
    replay(path, tracker)
    assert [e.kind for e in tracker.errors] == ["read-after-write"]


def _recorded_free(tmp_path, *after_free: str):
    """A version 2 trace as the sanitizer wrote it before frees were judged at reuse: a block of
    the default stream read on stream 1001, freed, then `after_free`."""
    return _trace(
        tmp_path,
        '{"format":"csan-trace","version":2}',
        '{"event":"stream_created","stream":1001}',
        '{"event":"allocated","ptr":4096,"size":512,"stream":0,"stack":[["train.py",3,"<module>"]]}',
        '{"event":"kernel_launched","stream":0,"operator":"aten::fill_.Scalar","accesses":[{"ptr":4096,"size":512,'
        '"is_write":true,"argument":"self","is_output":false}],"stack":[["train.py",4,"<module>"]]}',
        '{"event":"event_created","event_id":7}',
        '{"event":"event_recorded","event_id":7,"stream":0}',
        '{"event":"event_waited","event_id":7,"stream":1001,"stack":[["train.py",5,"<module>"]]}',
        '{"event":"kernel_launched","stream":1001,"operator":"aten::mul.Tensor","accesses":[{"ptr":4096,"size":512,'
        '"is_write":false,"argument":"self","is_output":false}],"stack":[["train.py",7,"<module>"]]}',
        '{"event":"freed","ptr":4096,"stack":[["train.py",8,"<module>"]]}',
        *after_free,
    )


def test_traces_recorded_before_replay_with_frees_judged_at_reuse(tmp_path):
    reuse = '{"event":"allocated","ptr":4096,"size":512,"stream":0,"stack":[["train.py",10,"<module>"]]}'
    wait = [
        '{"event":"event_recorded","event_id":7,"stream":1001}',
        '{"event":"event_waited","event_id":7,"stream":0,"stack":[["train.py",9,"<module>"]]}',
    ]
    lines = {}
    for name, after_free in (("no reuse", []), ("reuse", [reuse]), ("wait, reuse", [*wait, reuse])):
        tracker = Tracker()
        replay(_recorded_free(tmp_path, *after_free), tracker)
        lines[name] = [
            (e.kind, e.current.stack[-1].lineno, e.previous.stack[-1].lineno, e.reallocation.stack[-1].lineno)
            for e in tracker.errors
        ]
    assert lines == {"no reuse": [], "reuse": [("free-in-use", 8, 7, 10)], "wait, reuse": []}


def test_trace_events_cover_the_engine_api():
    public = {name for name, _ in inspect.getmembers(Tracker, inspect.isfunction) if not name.startswith("_")}
    queries = {"stats", "last_write"}  # read the engine's state, change nothing: no event to replay
    assert public - queries == set(EVENTS)
    for name, params in EVENTS.items():
        signature = list(inspect.signature(getattr(Tracker, name)).parameters)[1:]
        assert signature == [p for p, _ in params], name


def _trace(tmp_path, *lines: str):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


GOOD = json.dumps(HEADER)


def _launch(access: dict) -> str:
    return json.dumps({"event": "kernel_launched", "stream": 1, "operator": "x", "accesses": [access]})


@pytest.mark.parametrize(
    ("lines", "where", "problem"),
    [
        ((GOOD, '{"event": "device_synchronized"}', '{"event": "foo"}'), 3, "unknown event 'foo'"),
        ((GOOD, "{oops"), 2, "not JSON"),
        (('{"event": "device_synchronized"}',), 1, "not a csan trace"),
        (('{"format": "csan-trace", "version": 9}',), 1, "unsupported trace version 9"),
        ((GOOD, '{"event": "freed"}'), 2, "event 'freed' lacks 'ptr'"),
        ((GOOD, '{"event": "freed", "ptr": "0x10"}'), 2, "'ptr' must be an integer"),
        ((GOOD, '{"event": "stream_queried", "stream": 1, "done": 1}'), 2, "'done' must be true or false"),
        ((GOOD, '{"event": "kernel_launched", "stream": 1, "operator": "x", "accesses": [{"ptr": 1}]}'), 2, "access 0"),
        ((GOOD, '{"event": "freed", "ptr": 1, "stack": [["a.py", "x", "f"]]}'), 2, "'stack' must be"),
        ((GOOD, "[1]"), 2, "expected a JSON object"),
        ((GOOD, '{"event": "stream_created", "stream": 1, "blocking": "yes"}'), 2, "'blocking' must be true or false"),
        ((GOOD, _launch({"ptr": 0, "size": 8, "is_write": True, "sizes": [2]})), 2, "go together"),
        (
            (GOOD, _launch({"ptr": 0, "size": 8, "is_write": True, "element_size": 4, "sizes": [2], "strides": [2]})),
            2,
            "access 0: 'size' 8 is not the extent of its layout (12 bytes)",
        ),
        (
            (GOOD, _launch({"ptr": 0, "size": 8, "is_write": True, "element_size": 4, "sizes": [2], "strides": [-1]})),
            2,
            "'strides' must be a list of non-negative integers",
        ),
        (
            (
                GOOD,
                _launch({"ptr": 0, "size": 8, "is_write": True, "element_size": 4, "sizes": [2, 1], "strides": [1]}),
            ),
            2,
            "differ in length",
        ),
        ((GOOD, _launch({"extents": [[0, 8, 1]], "is_write": True})), 2, "'extents' must be a list of [ptr, size]"),
        ((GOOD, '{"stream": 1}'), 2, "without 'event'"),
        ((), 1, "empty trace"),
    ],
)
def test_bad_trace_is_a_located_error(tmp_path, lines, where, problem):
    path = _trace(tmp_path, *lines)
    with pytest.raises(TraceError) as info:
        replay(path, Tracker())
    assert str(info.value).startswith(f"{path}:{where}: ")
    assert problem in str(info.value)


def test_replay_main_exit_codes_and_output(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    with TraceWriter(Tracker(), path) as writer:
        _run(writer)
        expected = [to_json(e) for e in writer.errors]
    assert replay_main(str(path), "json") == 1
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert document["version"] == 1 and document["trace"] == str(path)
    assert document["reports"] == expected
    warnings = sum(r["severity"] == "warning" for r in expected)
    assert document["summary"] == {"errors": len(expected) - warnings, "warnings": warnings} and warnings == 1
    assert f"Found {len(expected) - warnings} error(s) and 1 warning(s)" in err

    assert replay_main(str(path), "text") == 1
    out, _ = capsys.readouterr()
    assert out.count("csan: ") == len(expected)

    clean = _trace(tmp_path, GOOD, '{"event": "kernel_launched", "stream": 1, "operator": "x", "accesses": []}')
    assert replay_main(str(clean), "text") == 0
    assert capsys.readouterr().out == ""


def test_replay_main_warnings_alone_pass(tmp_path, capsys):
    path = _trace(tmp_path, GOOD, '{"event": "event_waited", "event_id": 0, "stream": 1}')
    assert replay_main(str(path), "json") == 0
    assert [r["kind"] for r in json.loads(capsys.readouterr().out)["reports"]] == ["wait-unrecorded-event"]


def test_replay_main_bad_input(tmp_path, capsys):
    path = _trace(tmp_path, GOOD, '{"event": "foo"}')
    assert replay_main(str(path), "text") == 2
    assert capsys.readouterr().err.strip() == f"csan-lint: {path}:2: unknown event 'foo'"
    assert replay_main(str(tmp_path / "missing.jsonl"), "text") == 2
    assert "cannot read the trace" in capsys.readouterr().err
    assert replay_main(str(path), "xml") == 2


def test_documented_example_replays_to_a_race(tmp_path):
    doc = (Path(__file__).parents[2] / "docs" / "trace-format.md").read_text()
    example = doc.split("## Example", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.jsonl"
    path.write_text(example)
    tracker = Tracker()
    replay(path, tracker)
    assert [(e.kind, e.current.stack[-1].lineno) for e in tracker.errors] == [("read-after-write", 15)]


def test_a_blocking_streams_device_default_stream_round_trips(tmp_path):
    out = io.StringIO()
    writer = TraceWriter(None, out)
    writer.stream_created(0x7200, blocking=True, default_stream=-3)
    writer.stream_created(0x7300, blocking=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()[1:]]
    assert lines == [
        {"event": "stream_created", "stream": 0x7200, "blocking": True, "default_stream": -3, "stack": None},
        {"event": "stream_created", "stream": 0x7300, "blocking": True, "stack": None},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text(out.getvalue())
    calls = []

    class Recorder:
        def stream_created(self, *args, **kwargs):
            calls.append(kwargs)

    replay(path, Recorder())
    assert [c["default_stream"] for c in calls] == [-3, 0]
