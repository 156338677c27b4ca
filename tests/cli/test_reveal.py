"""`csan-lint reveal FILE:LINE`, end to end: the state it prints at a line of a small module
(values, orderings, the host's pending copies), the scopes it says are not interpreted, and the
errors on bad input. tests/cli/cases/reveal* hold its whole output as goldens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell import cli

MODULE = """\
import torch


def f(x, s, n):
    y = x * 2
    with torch.cuda.stream(s):
        z = y + 1
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        w = y + 2
    for _ in range(n):
        with torch.cuda.stream(s):
            v = y + 3
        y = x * 3
    return z, w, v


def helper(t):
    return t + 1


def g(x, s):
    with torch.cuda.stream(s):
        return helper(x)
    unreachable = x + 1


def download(x, flag):
    host = torch.empty(4, pin_memory=True)
    host.copy_(x, non_blocking=True)
    if flag:
        print(host)
    elif flag is None:
        pass
    torch.cuda.synchronize()
    done = host


class Holder:
    size = 4
"""


def line_of(text: str, source: str = MODULE) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if line.strip() == text)


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(MODULE)
    return tmp_path / "model.py"


def reveal(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["reveal", *arguments])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def state(line: int, analysis: str = "streams") -> dict[str, Any]:
    """The one run's state that `--format json` shows at `line`."""
    status, out, err = reveal(f"model.py:{line}", "--format", "json")
    assert status == 0, err
    report = json.loads(out)["analyses"][analysis]
    assert report["status"] == "interpreted", report
    [run] = report["runs"]
    return dict(run["state"])


def test_a_write_on_the_current_stream_is_not_ordered_before_the_side_stream_it_is_read_on(module: Path) -> None:
    found = state(line_of("z = y + 1"))
    assert found["current_stream"] == "s"
    [write] = found["values"]["y"]["last_writes"]
    assert (write["how"], write["stream"], write["at"]) == ("written", "<current>", "5:5 y")
    assert "s" not in write["ordered_before"]
    assert "z" not in found["values"]  # the state before the statement: `z` is not bound yet


def test_a_wait_orders_the_write_before_the_waiting_stream(module: Path) -> None:
    found = state(line_of("w = y + 2"))
    [write] = found["values"]["y"]["last_writes"]
    assert "s" in write["ordered_before"]
    [read] = found["values"]["y"]["reads_since"]
    assert (read["how"], read["stream"], read["at"]) == ("read", "s", "7:13 y")
    assert found["last_launch_ordered_before"]["<current>"] == ["<current>", "s"]


def test_in_a_loop_the_state_is_the_join_of_every_pass(module: Path) -> None:
    status, out, _ = reveal(f"model.py:{line_of('v = y + 3')}", "--format", "json")
    [run] = json.loads(out)["analyses"]["streams"]["runs"]
    assert run["visits"] > 1
    writes = {(write["at"], tuple(write["ordered_before"])) for write in run["state"]["values"]["y"]["last_writes"]}
    # the write before the loop (waited for), and the previous pass's write at the loop's end (not)
    assert writes == {("5:5 y", ("<current>", "s")), (f"{line_of('y = x * 3')}:9 y", ("<current>",))}


def test_a_pending_non_blocking_download_is_in_the_host_state(module: Path) -> None:
    found = state(line_of("if flag:"), "host")
    [copy] = found["pending_downloads"]["host"]
    assert copy["copy"].startswith(f"{line_of('host.copy_(x, non_blocking=True)')}:5 host.copy_(x")
    assert copy["synced_by"] == ["<current>"]
    assert found["pinned"] == ["host"]
    assert state(line_of("done = host"), "host")["pending_downloads"] == {}  # the sync waited for it


def test_the_text_output_says_the_same(module: Path) -> None:
    status, out, err = reveal(f"model.py:{line_of('z = y + 1')}")
    assert status == 0 and err == ""
    assert out.startswith(f"model.py:{line_of('z = y + 1')}: z = y + 1\nscope: function f (line 4)\n")
    assert "streams (lint/streamflow.py): interpreted\n  its own run: the state at its visit\n" in out
    assert "          - written on <current> at 5:5 y in f; ordered_before: <current>\n" in out
    assert "host (lint/hostflow.py): interpreted\n" in out


def test_an_elif_is_a_statement_and_a_function_without_stream_code_is_not_interpreted(module: Path) -> None:
    found = state(line_of("elif flag is None:"), "host")  # the path where `if flag:` did not read it
    assert [copy["stream"] for copy in found["pending_downloads"]["host"]] == ["<current>"]
    status, out, _ = reveal(f"model.py:{line_of('print(host)')}", "--format", "json")
    report = json.loads(out)["analyses"]["streams"]
    assert report["status"].startswith("not interpreted: no stream code reaches it")


def test_a_function_only_summarised_for_its_callers_is_not_interpreted(module: Path) -> None:
    status, out, _ = reveal(f"model.py:{line_of('return t + 1')}")
    assert status == 0
    assert "streams (lint/streamflow.py): not interpreted: no stream code reaches it" in out
    assert "time(s) only to summarise it for its callers" in out


def test_a_line_after_a_return_is_not_reached(module: Path) -> None:
    status, out, _ = reveal(f"model.py:{line_of('unreachable = x + 1')}", "--format", "json")
    assert status == 0
    report = json.loads(out)["analyses"]["streams"]
    assert report["status"].startswith("not reached")
    assert report["runs"] == [{"run": "its own run", "visits": 0, "state": None}]


def test_a_class_body_is_not_interpreted(module: Path) -> None:
    status, out, _ = reveal(f"model.py:{line_of('size = 4')}")
    assert status == 0
    assert "scope: class Holder" in out
    assert "streams (lint/streamflow.py): not interpreted: the analysis does not interpret class bodies" in out


def test_stream_and_context_bindings_and_path_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = """\
import torch

side = torch.cuda.Stream()
ctx = torch.cuda.stream(side)
with ctx:
    a = torch.ones(2, device="cuda")
if ready:
    side.wait_stream(torch.cuda.current_stream())
    b = a + 1
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    status, out, _ = reveal(f"model.py:{line_of('b = a + 1', source)}", "--format", "json")
    assert status == 0
    found = json.loads(out)
    assert found["scope"] == {"kind": "module", "name": "<module>", "line": 1}
    [run] = found["analyses"]["streams"]["runs"]
    assert run["state"]["streams"] == {"side": "side"}
    assert run["state"]["stream_contexts"] == {"ctx": "side"}
    assert run["state"]["values"]["a"]["allocated_on"] == "side"
    assert run["state"]["path_facts"] == ["ready"]


def test_a_released_tensor_is_pending_at_the_next_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state before the statement, before the interpreter judges the release there."""
    source = """\
import torch


def f(s):
    x = torch.empty(4, device="cuda")
    with torch.cuda.stream(s):
        y = x * 2
    del x
    z = torch.empty(4, device="cuda")
    return y, z
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    line = line_of('z = torch.empty(4, device="cuda")', source)
    status, out, _ = reveal(f"model.py:{line}", "--format", "json")
    [run] = json.loads(out)["analyses"]["streams"]["runs"]
    [released] = run["state"]["released_pending"]
    assert (released["name"], released["released_at"], released["allocated_on"]) == ("x", "8:5 del x", "<current>")
    [use] = released["uses_on_other_streams"]
    assert (use["stream"], use["at"], use["ordered_before"]) == ("s", "7:13 x", ["s"])
    assert "x" not in run["state"]["values"]


def test_a_method_run_from_what_the_other_methods_leave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = """\
import torch


class Loader:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def load(self, x):
        with torch.cuda.stream(self.side):
            self.buf = x * 2

    def use(self):
        return self.buf + 1
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    status, out, _ = reveal(f"model.py:{line_of('return self.buf + 1', source)}", "--format", "json")
    [run] = json.loads(out)["analyses"]["streams"]["runs"]
    assert run["run"] == "from what the class's other methods leave written on a side stream"
    [write] = run["state"]["values"]["self.buf"]["last_writes"]
    assert (write["stream"], write["in"], write["ordered_before"]) == ("self.side", "Loader.load", ["self.side"])


def test_the_scope_is_the_innermost_function_and_a_continued_line_is_its_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """\
import torch


def outer(x, s):
    def inner(t):
        with torch.cuda.stream(s):
            u = t + 1
        return u

    y = inner(
        x,
    )
    return y
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    status, out, _ = reveal(f"model.py:{line_of('u = t + 1', source)}", "--format", "json")
    found = json.loads(out)
    assert found["scope"] == {"kind": "function", "name": "outer.inner", "line": 5}
    assert found["analyses"]["streams"]["status"] == "interpreted"
    status, out, _ = reveal(f"model.py:{line_of('x,', source)}", "--format", "json")
    found = json.loads(out)
    assert (status, found["statement"], found["statement_line"]) == (0, "y = inner(", line_of("y = inner(", source))
    assert found["scope"]["name"] == "outer"


def test_the_projects_settings_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream context the project declares makes its stream current, as in a lint run."""
    source = """\
import torch
from mypkg.cuda_utils import on_stream


def f(x, s):
    y = x * 2
    with on_stream(s):
        z = y + 1
    return z
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    line = line_of("z = y + 1", source)
    status, out, _ = reveal(f"model.py:{line}")
    assert status == 0 and "\nnote: a lint run skips this file: its code names no stream API" in out
    assert state(line)["current_stream"] == "<current>"
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nstream-contexts = ["mypkg.cuda_utils.on_stream"]\n')
    assert state(line)["current_stream"] == "s"
    status, out, _ = reveal(f"model.py:{line}")
    assert (
        "note:" not in out
        and json.loads(reveal(f"model.py:{line}", "--format", "json")[1])["skipped_by_prefilter"] is False
    )


def test_a_function_run_again_with_the_uploads_its_last_call_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """\
import torch


class Staging:
    def __init__(self, n):
        self.host = torch.empty(n, pin_memory=True)
        self.device = torch.empty(n, device="cuda")

    def send(self, values):
        self.host[:] = values
        self.device.copy_(self.host, non_blocking=True)
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    status, out, _ = reveal(f"model.py:{line_of('self.host[:] = values', source)}", "--format", "json")
    first, again = json.loads(out)["analyses"]["host"]["runs"]
    assert (first["run"], first["state"]["pending_uploads"]) == ("its own run", {})
    assert again["run"] == "called again, meeting the uploads its last call left running"
    [upload] = again["state"]["pending_uploads"]["self.host"]
    assert upload["copy"].startswith(f"{line_of('self.device.copy_(self.host, non_blocking=True)', source)}:9 ")


def test_assumptions_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An annotated parameter is written by the caller (on by default); `--assume` switches it."""
    source = """\
import torch


def h(x: torch.Tensor, s):
    with torch.cuda.stream(s):
        z = x + 1
    return z
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    [write] = state(7)["values"]["x"]["last_writes"]
    assert (write["how"], write["stream"], write["at"], write["ordered_before"]) == (
        "by the caller",
        "<current>",
        "4:7 x",
        ["<current>"],
    )
    status, out, err = reveal(
        "model.py:7", "--format", "json", "--assume", "annotated-parameters-written-by-caller=off"
    )
    [run] = json.loads(out)["analyses"]["streams"]["runs"]
    assert (status, run["state"]["values"]["x"]["last_writes"]) == (0, [])
    status, out, err = reveal("model.py:7", "--assume", "no-such-assumption=on")
    assert (status, out) == (2, "") and err.startswith("error: --assume: unknown assumption `no-such-assumption`")


def test_a_value_that_is_a_tensor_by_an_assumption_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a module's forward returns is a tensor by `unseen-results-are-tensors`: reveal names
    it beside the write; a torch op's result names nothing; switched off, the result is no value."""
    source = """\
import torch


def run(model, x, s):
    hidden = model(x)
    made = torch.relu(x)
    with torch.cuda.stream(s):
        out = hidden * made
    return out
"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(source)
    values = state(8)["values"]
    assert values["hidden"]["a_tensor_assuming"] == ["unseen-results-are-tensors"]
    assert values["made"]["a_tensor_assuming"] == []
    status, out, _ = reveal("model.py:8", "--format", "json", "--assume", "unseen-results-are-tensors=off")
    [run] = json.loads(out)["analyses"]["streams"]["runs"]
    assert status == 0 and "hidden" not in run["state"]["values"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["missing.py:3"], "error: missing.py: cannot read file: No such file or directory\n"),
        (["model.py:900"], "error: model.py:900: line out of range: the file has "),
        (["model.py:0"], "error: model.py:0: line out of range: the file has "),
        (["model.py:3"], "error: model.py:3: no statement at this line"),
        (["model.py"], "error: `model.py`: give a file and a line, as in `csan-lint reveal src/model.py:12`\n"),
        (["model.py:x"], "error: `model.py:x`: give a file and a line"),
    ],
)
def test_bad_input_is_a_located_error(module: Path, arguments: list[str], message: str) -> None:
    status, out, err = reveal(*arguments)
    assert (status, out) == (2, "")
    assert err.startswith(message)


def test_a_file_that_does_not_parse_is_a_located_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("import torch\nwith torch.cuda.stream(s)\n    pass\n")
    status, out, err = reveal("broken.py:2")
    assert (status, out) == (2, "")
    assert err.startswith("error: broken.py:2:") and "syntax error" in err


def test_the_output_does_not_depend_on_hash_seeds(module: Path) -> None:
    """Sets of accesses iterate by their nodes' hashes: the output is sorted, so runs agree."""
    line = line_of("v = y + 3")
    outputs = {
        subprocess.run(
            [sys.executable, "-m", "csan_lint", "reveal", f"model.py:{line}", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
