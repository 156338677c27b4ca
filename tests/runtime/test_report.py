"""Reports: one-line messages, text with the user's frames only, JSON with the same data."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig

import pytest

from csan_lint.runtime import kinds
from csan_lint.runtime.events import Access
from csan_lint.runtime.report import message, render_text, to_json
from csan_lint.runtime.stacks import (
    Frame,
    capture_stack,
    innermost_user_frame,
    is_user_file,
    resolve,
    user_frames,
)
from csan_lint.runtime.tracker import Tracker

S0, S1, S2 = 0, 1001, 1002
BASE = 0x2000


def _scenario(kind: str) -> Tracker:
    """A tracker that has seen exactly one report of `kind`, with stacks from this file."""
    t = Tracker()
    write = [Access(BASE, 64, True, "self")]
    read = [Access(BASE, 64, False, "self")]
    if kind == kinds.READ_AFTER_WRITE:
        t.kernel_launched(S0, "aten::fill_.Scalar(Tensor(a!) self)", write, capture_stack())
        t.kernel_launched(S1, "aten::mul.Tensor(Tensor self, Tensor other)", read, capture_stack())
    elif kind == kinds.WRITE_AFTER_READ:
        t.kernel_launched(S0, "read", read, capture_stack())
        t.kernel_launched(S1, "write", write, capture_stack())
    elif kind == kinds.WRITE_AFTER_WRITE:
        t.kernel_launched(S0, "write", write, capture_stack())
        t.kernel_launched(S1, "write", write, capture_stack())
    elif kind == kinds.FREE_IN_USE:
        t.allocated(BASE, 64, S0, capture_stack())
        t.kernel_launched(S1, "read", read, capture_stack())
        t.freed(BASE, capture_stack())
        t.allocated(BASE, 64, S0, capture_stack())  # handed out again before S1's read is done
    elif kind == kinds.HOST_READ_PENDING:
        t.kernel_launched(S1, "copy_", write, capture_stack())
        t.host_accessed(BASE, 64, False, "tolist", capture_stack())
    elif kind == kinds.HOST_WRITE_PENDING:
        t.kernel_launched(S1, "copy_", read, capture_stack())
        t.host_accessed(BASE, 64, True, "fill_", capture_stack())
    elif kind == kinds.CAPTURE_ON_DEFAULT_STREAM:
        t.capture_began(S0, capture_stack())
    elif kind == kinds.UNJOINED_CAPTURE_FORK:
        t.capture_began(S1, capture_stack())
        t.event_recorded(1, S1)
        t.event_waited(1, S2)
        t.kernel_launched(S2, "mul", write, capture_stack())
        t.capture_ended(S1, capture_stack())
    elif kind == kinds.WAIT_UNRECORDED_EVENT:
        t.event_created(5)
        t.event_waited(5, S1, capture_stack())
    return t


@pytest.mark.parametrize("kind", kinds.ALL_KINDS)
def test_every_kind_renders(kind):
    (report,) = _scenario(kind).errors
    assert report.kind == kind
    line = message(report)
    assert line and "\n" not in line
    text = render_text(report)
    assert text.startswith(f"csan: {kind}: ")
    assert f'File "{__file__}"' in text
    data = to_json(report)
    assert json.loads(json.dumps(data)) == data
    assert data["kind"] == kind and data["message"] == line
    assert data["severity"] == ("warning" if kind == kinds.WAIT_UNRECORDED_EVENT else "error")


def test_text_names_both_accesses_and_hides_library_frames():
    (report,) = _scenario(kinds.READ_AFTER_WRITE).errors
    text = render_text(report)
    assert f"`aten::mul.Tensor` at {__file__}:" in text and " on stream 1001 reads memory" in text
    assert "`aten::fill_.Scalar` at" in text and "on the default stream may still be writing" in text
    assert "reading argument `self`" in text and "writing argument `self`" in text
    assert "_pytest" not in text and "pluggy" not in text
    assert "(its allocation was not seen)" in text


def test_json_carries_user_frames_innermost_last():
    (report,) = _scenario(kinds.FREE_IN_USE).errors
    data = to_json(report)
    assert set(data) == {"kind", "severity", "message", "site", "allocation", "current", "previous", "reallocation"}
    assert set(data["current"]) == {
        "stream", "stream_name", "stream_created", "operator", "argument", "is_write", "stack",
    }  # fmt: skip
    assert set(data["reallocation"]) == set(data["current"])
    assert data["allocation"]["ptr"] == BASE and data["allocation"]["stream"] == S0
    assert (data["current"]["operator"], data["reallocation"]["operator"]) == ("free", "reallocation")
    innermost = data["previous"]["stack"][-1]
    assert innermost["file"] == __file__ and innermost["function"] == "_scenario"
    assert all(is_user_file(f["file"]) for f in data["current"]["stack"])
    assert [frame["line"] for frame in data["reallocation"]["stack"]][-1] > innermost["line"]


def test_a_free_in_use_names_the_free_the_use_and_the_reallocation():
    text = render_text(_scenario(kinds.FREE_IN_USE).errors[0])
    assert "is freed at " in text and "handed out again to an allocation on the default stream at " in text
    assert "Freed for reuse on the default stream, from:" in text
    assert "Previous access: stream 1001, reading" in text
    assert "Reallocation: allocated again on the default stream, from:" in text
    assert text.count(", in _scenario") == 4  # free, use, reallocation, allocation


def test_other_kinds_have_no_reallocation():
    data = to_json(_scenario(kinds.READ_AFTER_WRITE).errors[0])
    assert data["reallocation"] is None


def test_json_of_capture_error_has_no_allocation():
    (report,) = _scenario(kinds.CAPTURE_ON_DEFAULT_STREAM).errors
    data = to_json(report)
    assert data["allocation"] is None and data["previous"] is None


def test_user_frames_hide_torch_stdlib_and_own_files():
    torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
    stdlib_file = os.path.join(sysconfig.get_paths()["stdlib"], "json", "decoder.py")
    own_file = resolve(_scenario(kinds.WRITE_AFTER_WRITE).errors[0].current.stack)[-1]
    frames = [
        Frame(__file__, 1, "test"),
        Frame(os.path.join(torch_dir, "nn", "modules", "linear.py"), 5, "forward"),
        Frame(stdlib_file, 9, "decode"),
        Frame(
            os.path.join(os.path.dirname(importlib.util.find_spec("csan_lint.runtime").origin), "tracker.py"), 3, "x"
        ),
        own_file,
    ]
    assert user_frames(frames) == [frames[0], own_file]


def test_resolve_accepts_live_and_replayed_stacks():
    live = capture_stack()
    here = sys._getframe().f_lineno - 1
    assert resolve(live)[-1] == Frame(__file__, here, "test_resolve_accepts_live_and_replayed_stacks")
    assert resolve([["a.py", 3, "f"]]) == [Frame("a.py", 3, "f")]
    assert resolve((Frame("b.py", 4, "g"),)) == [Frame("b.py", 4, "g")]
    assert resolve(None) == []


def test_resolved_lines_match_f_lineno_on_every_frame():
    def inner():
        stack, line = capture_stack(), sys._getframe().f_lineno
        expected, frame = [], sys._getframe()
        while frame is not None:
            expected.append(Frame(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        return stack, expected[::-1], line

    stack, expected, line = inner()
    resolved = resolve(stack)
    assert len(resolved) > 10 and resolved[:-1] == expected[:-1]  # pytest's frames, this test
    assert resolved[-1] == expected[-1]._replace(lineno=line)


def test_capture_stops_at_a_stop_frame():
    def runner():
        return middle()

    def middle():
        return capture_stack(stop={id(runner.__code__)})

    assert [f.function for f in resolve(runner())] == ["middle"]
    assert [f.function for f in resolve(capture_stack(stop={id(test_capture_stops_at_a_stop_frame.__code__)}))] == []


def test_innermost_user_frame_agrees_with_resolve():
    def helper():
        return capture_stack()

    live = helper()
    assert innermost_user_frame(live) == user_frames(resolve(live))[-1]
    assert innermost_user_frame(live).function == "helper"
    replayed = tuple(resolve(live))
    assert innermost_user_frame(replayed) == innermost_user_frame(live)
    library_only = tuple(f for f in replayed if not is_user_file(f.filename))
    assert innermost_user_frame(library_only) is None and innermost_user_frame(None) is None


@pytest.mark.parametrize(
    ("path", "user"),
    [
        ("/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", False),
        ("/usr/lib/python3/dist-packages/_pytest/python.py", False),
        ("/opt/conda/lib/python3.10/site-packages/pluggy/_callers.py", False),
        ("/opt/conda/lib/python3.10/threading.py", False),
        ("/opt/conda/lib/python3.10/site-packages/torchvision/ops/boxes.py", True),
        ("/opt/conda/lib/python3.10/site-packages/mylib/train.py", True),
        ("/home/me/project/torch_utils/train.py", True),
        ("train.py", True),
        ("<string>", True),
        ("<frozen importlib._bootstrap>", False),
    ],
)
def test_frames_recorded_on_another_machine(path, user):
    """Replayed traces carry the recording machine's paths: its libraries stay hidden."""
    assert is_user_file(path) is user
