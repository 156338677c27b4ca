"""Test isolation in the pytest plugin, for real on the emulated device: a stream left current
by one test is named once and restored before the next, and a block freed after its test ended
is charged to the test that allocated it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # each test runs pytest in a subprocess that imports torch

EMULATED = ("--csan", "--csan-device", "emulated")

LEAKING_CAPTURE = """
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

copy_stream = torch.cuda.Stream()


def test_a_capture_that_raises():
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with pytest.raises(RuntimeError, match="unjoined"):
        with torch.cuda.graph(graph, stream=copy_stream):  # __exit__ raises before restoring
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                x.mul(2)


def test_b_races_on_the_copy_stream():
    x = torch.ones(4, device="cuda") * 3
    with torch.cuda.stream(copy_stream):
        y = x + 1
    torch.cuda.current_stream().wait_stream(copy_stream)
    assert y.tolist() == [4.0] * 4
"""

LATE_FREE = """
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

kept = []


def test_a_keeps_a_block_used_on_a_side_stream():
    x = torch.ones(4, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul(2)
    kept.append(x)  # alive past the test, like a failure's traceback keeps its locals


def test_b_drops_it_and_allocates_again():
    kept.clear()
    torch.empty(4, device="cuda")  # the default stream's pool may hand out the kept block
"""


def line_of(source: str, text: str) -> int:
    """1-based line of `text` in the module pytester writes (it strips the leading newline)."""
    return next(i for i, line in enumerate(source.strip().splitlines(), 1) if text in line)


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_leaked_capture_stream_is_named_once_and_the_next_race_is_still_found(pytester: pytest.Pytester):
    pytester.makepyfile(test_leak=LEAKING_CAPTURE)
    report = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess(*EMULATED, f"--csan-report={report}")
    result.assert_outcomes(failed=2)  # a: its own unjoined fork; b: the race the leak used to hide
    result.stdout.fnmatch_lines(
        [
            f"*read-after-write*test_leak.py:{line_of(LEAKING_CAPTURE, 'y = x + 1')}*",
            "*CsanIsolationWarning: csan: test_leak.py::test_a_capture_that_raises left stream * current on cuda:0; "
            "the default stream was restored",
        ]
    )
    assert result.stdout.str().count(" left stream ") == 1
    found = records(report)
    leaks = [record for record in found if record["type"] == "stream-leak"]
    assert [(leak["nodeid"], leak["device"]) for leak in leaks] == [("test_leak.py::test_a_capture_that_raises", 0)]
    races = {record["nodeid"]: record["report"]["kind"] for record in found if record["type"] == "race"}
    assert races == {
        "test_leak.py::test_a_capture_that_raises": "unjoined-capture-fork",
        "test_leak.py::test_b_races_on_the_copy_stream": "read-after-write",
    }


def test_a_block_freed_in_a_later_test_is_charged_to_the_test_that_allocated_it(pytester: pytest.Pytester):
    pytester.makepyfile(test_late=LATE_FREE)
    report = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess(*EMULATED, f"--csan-report={report}")
    result.assert_outcomes(passed=2)  # the test running at the free is not failed for it
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # but the run is
    result.stdout.fnmatch_lines(
        [
            "*CsanIsolationWarning: csan: a race found after test_late.py::test_a_keeps_a_block_used_on_a_side_stream "
            "ended, charged to it:",
            "*csan: free-in-use: *",
        ]
    )
    (race,) = [record for record in records(report) if record["type"] == "race"]
    assert race["nodeid"] == "test_late.py::test_a_keeps_a_block_used_on_a_side_stream"
    assert race["report"]["current"]["stack"][-1]["line"] == line_of(LATE_FREE, "kept.clear()")


def test_a_late_race_does_not_fail_the_run_under_report_only(pytester: pytest.Pytester):
    pytester.makepyfile(test_late=LATE_FREE)
    result = pytester.runpytest_subprocess(*EMULATED, "--csan-report-only")
    assert result.ret == pytest.ExitCode.OK
