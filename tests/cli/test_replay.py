"""`csan-lint --replay TRACE` on traces that are not what they claim: each is exit 2 with a
`trace:line:` message on stderr (never a traceback); good traces honour --exit-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell.cli import main
from csan_lint.runtime.events import Access
from csan_lint.runtime.trace import HEADER, TraceWriter

HEADER_LINE = json.dumps(HEADER) + "\n"


def _replay(trace: Path, *options: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--replay", str(trace), *options])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def _racy(path: Path) -> Path:
    """A read on a side stream of what the default stream wrote, with no ordering: one race."""
    with TraceWriter(None, path) as trace:
        trace.stream_created(7)
        trace.allocated(0x1000, 64, 0, None)
        trace.kernel_launched(0, "fill_", [Access(0x1000, 64, True, "self", True)], None)
        trace.kernel_launched(7, "mul", [Access(0x1000, 64, False, "self")], None)
    return path


def _event(**fields: object) -> str:
    return json.dumps(fields) + "\n"


ALLOCATED = {"event": "allocated", "stream": 0, "stack": None}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"\x1f\x8b\x08\x00\xff\xfe binary",
            "run.trace.jsonl:1: not UTF-8 text at byte 2: a binary or compressed file",
        ),
        ((HEADER_LINE + '{"event": "stream_cre').encode(), "run.trace.jsonl:2: not JSON: Unterminated string"),
        ((HEADER_LINE + '{"event": "stream_cre').encode(), "(the trace is truncated: its last line is cut short)"),
        (
            (HEADER_LINE + _event(**ALLOCATED, ptr=4096, size=-1)).encode(),
            "run.trace.jsonl:2: event 'allocated': 'size' must be an integer from 0 to 2**64 - 1, got -1",
        ),
        (
            (HEADER_LINE + _event(**ALLOCATED, ptr=-4096, size=8)).encode(),
            "run.trace.jsonl:2: event 'allocated': 'ptr' must be an integer from 0",
        ),
        (
            (HEADER_LINE + _event(**ALLOCATED, ptr=2**64, size=8)).encode(),
            "'ptr' must be an integer from 0 to 2**64 - 1, got 18446744073709551616",
        ),
        (
            (HEADER_LINE + _event(**ALLOCATED, ptr=2**64 - 8, size=16)).encode(),
            "run.trace.jsonl:2: event 'allocated': 'ptr' + 'size' (0xfffffffffffffff8 + 16) runs past",
        ),
        (
            (
                HEADER_LINE
                + _event(
                    event="kernel_launched",
                    stream=0,
                    operator="add_",
                    accesses=[{"ptr": 16, "size": 2**70, "is_write": True}],
                )
            ).encode(),
            "run.trace.jsonl:2: event 'kernel_launched': access 0: 'size' must be an integer from 0 to 2**64 - 1",
        ),
        (
            (HEADER_LINE + '{"event": "freed", "ptr": ' + "9" * 5000 + "}\n").encode(),
            "run.trace.jsonl:2: not a trace line: Exceeds the limit",
        ),
        ((HEADER_LINE + "[" * 100_000 + "]" * 100_000 + "\n").encode(), "run.trace.jsonl:2: not a trace line"),
    ],
    ids=[
        "binary",
        "truncated",
        "truncated-says-so",
        "negative-size",
        "negative-ptr",
        "ptr-past-64-bits",
        "range-past-64-bits",
        "access-size-past-64-bits",
        "huge-number",
        "deep-nesting",
    ],
)
def test_a_bad_trace_is_a_located_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.trace.jsonl").write_bytes(content)
    code, stdout, stderr = _replay(Path("run.trace.jsonl"))
    assert code == 2
    assert message in stderr and "Traceback" not in stderr
    assert stdout == ""


def test_exit_zero_is_honoured(tmp_path: Path) -> None:
    trace = _racy(tmp_path / "race.trace.jsonl")
    assert _replay(trace)[0] == 1
    code, stdout, stderr = _replay(trace, "--exit-zero")
    assert code == 0 and "read-after-write" in stdout.lower() + stderr.lower()


def test_options_replay_would_ignore_are_refused(tmp_path: Path) -> None:
    trace = _racy(tmp_path / "race.trace.jsonl")
    for extra in (["src"], ["--select", "CSL1"], ["--fix"], ["--confirm"], ["--statistics"]):
        code, _, stderr = _replay(trace, *extra)
        assert code == 2 and stderr.startswith("error: --replay reads only the trace"), (extra, stderr)
    code, stdout, stderr = _replay(trace, "--format", "json", "-q")
    assert code == 1 and json.loads(stdout)["summary"]["errors"] == 1 and stderr == ""


def test_chrome_is_a_replay_format(tmp_path: Path) -> None:
    code, out, _ = _replay(_racy(tmp_path / "racy.jsonl"), "--format", "chrome")
    assert code == 1
    document = json.loads(out)
    kernels = [e["name"] for e in document["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"]
    assert kernels == ["fill_", "mul"]
    assert [e["cat"] for e in document["traceEvents"] if e["ph"] == "s"] == ["race"]
    static = CliRunner().invoke(main, ["--format", "chrome", str(tmp_path)])
    assert static.exit_code == 2 and "--format chrome is for --replay TRACE" in static.stderr
