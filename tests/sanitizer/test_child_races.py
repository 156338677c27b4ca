"""Races in child processes of a `pytest --csan` run on the emulated device reach the parent's
run: a `python -c` child, multiprocessing's spawn workers and a fork, each failing the test that
started it; `csan-lint --confirm` reports them too, as races of a child process."""

from __future__ import annotations

import json
import os

import pytest

from csan_lint.runtime.child_races import REPORTS_VARIABLE, ChildReports

pytestmark = pytest.mark.slow  # pytest in a subprocess, whose children import torch: seconds each

RACY_CHILD = """
import torch
a = torch.ones(1 << 10, device="cuda")
side = torch.cuda.Stream()
{wait}
with torch.cuda.stream(side):
    b = a * 2
torch.cuda.synchronize()
"""

CHILD_TESTS = f"""
import multiprocessing
import subprocess
import sys

import torch
import torch.multiprocessing

RACY = {RACY_CHILD.format(wait="")!r}
CLEAN = {RACY_CHILD.format(wait="side.wait_stream(torch.cuda.current_stream())")!r}


def run(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def side_read(_=None):
    a = torch.ones(1 << 10, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        b = a * 2  # the children's race
    torch.cuda.synchronize()
    return 0


def test_racy_child():
    run(RACY)


def test_clean_child():
    run(CLEAN)


def test_child_killed_after_its_race():
    code = RACY + "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr  # no exit handler ran: the race was written as found


def test_spawned_workers():
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(side_read, [0, 1]) == [0, 0]


def test_forked_child():
    child = multiprocessing.get_context("fork").Process(target=side_read)
    child.start()
    child.join()
    assert child.exitcode == 0


def test_forkserver_child():
    child = multiprocessing.get_context("forkserver").Process(target=side_read)
    child.start()
    child.join()
    assert child.exitcode == 0


def test_torch_spawned_child():
    torch.multiprocessing.spawn(side_read, nprocs=1)
"""


def line_of(text: str, source: str) -> int:
    return source.splitlines().index(text) + 1


def test_races_of_children_fail_the_tests_that_started_them(pytester: pytest.Pytester):
    pytester.makepyfile(test_children=CHILD_TESTS)
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", "--csan-device", "emulated", f"--csan-report={path}")
    result.assert_outcomes(failed=6, passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*CUDA stream sanitizer: 1 race(s)*",
            "csan: in child process * (`python -c *import torch a = torch.ones*`):",
            "csan: read-after-write: `aten::mul.Tensor` at <string>:7 *",
        ]
    )
    result.stdout.fnmatch_lines(["csan: in child process * forked from * (`python *pytest*`):"])
    records = [json.loads(line) for line in path.read_text().splitlines()]
    raced = [(r["nodeid"].split("::")[1], r["report"]) for r in records if r["type"] == "race"]
    races = dict(raced)
    assert sorted(name for name, _ in raced) == [  # a pool of two workers racing the same way: one report
        "test_child_killed_after_its_race",
        "test_forked_child",
        "test_forkserver_child",
        "test_racy_child",
        "test_spawned_workers",
        "test_torch_spawned_child",
    ]
    child = races["test_racy_child"]
    assert child["kind"] == "read-after-write"
    assert child["child"]["argv"][1:] == ["-c", RACY_CHILD.format(wait="")]
    assert child["child"]["pid"] != os.getpid() and "forked_from" not in child["child"]
    assert child["message"].startswith(f"in child process {child['child']['pid']} (`python -c ")
    assert (child["current"]["stack"][-1]["line"], child["previous"]["stack"][-1]["line"]) == (7, 3)
    source = (pytester.path / "test_children.py").read_text()
    for name in ("test_spawned_workers", "test_forked_child", "test_forkserver_child", "test_torch_spawned_child"):
        worker = races[name]
        assert worker["current"]["stack"][-1] == {
            "file": str(pytester.path / "test_children.py"),
            "line": line_of("        b = a * 2  # the children's race", source),
            "function": "side_read",
        }
    assert "spawn_main" in " ".join(races["test_spawned_workers"]["child"]["argv"])
    assert "spawn_main" in " ".join(races["test_torch_spawned_child"]["child"]["argv"])
    assert "multiprocessing.forkserver" in " ".join(races["test_forkserver_child"]["child"]["argv"])
    assert races["test_forked_child"]["child"]["forked_from"] != races["test_forked_child"]["child"]["pid"]
    ended = {r["nodeid"].split("::")[1]: r["outcome"] for r in records if r["type"] == "test-end"}
    assert ended["test_clean_child"] == "passed"


RACY_AT_SESSION_END = f"""
import subprocess
import sys

import pytest


@pytest.hookimpl(tryfirst=True)  # before the csan session reads its children for the last time
def pytest_sessionfinish(session):
    subprocess.run([sys.executable, "-c", {RACY_CHILD.format(wait="")!r}], check=True, timeout=300)
"""


def test_a_race_of_a_child_started_after_the_last_test_fails_the_run(pytester: pytest.Pytester):
    pytester.makeconftest(RACY_AT_SESSION_END)
    pytester.makepyfile(test_nothing="def test_passes():\n    pass\n")
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", "--csan-device", "emulated", f"--csan-report={path}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*csan: races in child processes after the last test*", "csan: in child process * (`python -c *"]
    )
    races = [json.loads(line) for line in path.read_text().splitlines() if '"race"' in line]
    assert [(race["nodeid"], race["report"]["kind"]) for race in races] == [(None, "read-after-write")]


NESTED_RUN = """
import subprocess
import sys


def test_runs_a_sanitized_suite_of_its_own():
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--csan", "--csan-device", "emulated"]
    done = subprocess.run([*command, "inner/test_inner.py"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # the inner run failed its racy test
    assert "CUDA stream sanitizer: 1 race(s)" in done.stdout
"""

INNER_RACE = """
import torch


def test_inner_race():
    a = torch.ones(1 << 10, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        b = a * 2
    torch.cuda.synchronize()
"""


def test_a_child_running_pytest_csan_reports_to_its_own_run_only(pytester: pytest.Pytester):
    """The child's own sanitizer takes over from the one started for the parent: the race is
    the inner run's failure, not the outer test's too."""
    pytester.makepyfile(test_outer=NESTED_RUN)
    (pytester.path / "inner").mkdir()
    (pytester.path / "inner" / "test_inner.py").write_text(INNER_RACE)
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", "--csan-device=emulated", f"--csan-report={path}", "test_outer.py")
    result.assert_outcomes(passed=1)
    assert [json.loads(line)["type"] for line in path.read_text().splitlines()] == ["session", "test-start", "test-end"]


def test_the_parent_reads_only_complete_lines_and_each_once(tmp_path, monkeypatch):
    monkeypatch.delenv(REPORTS_VARIABLE, raising=False)
    reports = ChildReports()
    try:
        assert os.environ[REPORTS_VARIABLE] == reports.directory
        line = json.dumps({"type": "race", "report": {"kind": "read-after-write", "message": "m"}, "child": {"pid": 7}})
        with open(os.path.join(reports.directory, "7-a.jsonl"), "w") as file:
            file.write(line + "\n" + line[:20])  # the child is writing its second line
            file.flush()
            first, _ = reports.collect()
            assert [race.report["message"] for race in first] == ["in child process 7 (`?`): m"]
            file.write(line[20:] + "\n")
        second, errors = reports.collect()
        assert len(second) == 1 and errors == []
        assert reports.collect() == ([], [])
    finally:
        reports.close()
    assert REPORTS_VARIABLE not in os.environ and not os.path.exists(reports.directory)


CONFIRM_WORK = """
import torch


def side_read():
    a = torch.ones(1 << 10, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        return a * 2
"""

CONFIRM_TEST = """
import subprocess
import sys

from app import work  # what --confirm's selection follows to the stream code


def test_child_reads_on_a_side_stream():
    code = "from app.work import side_read; side_read()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
"""


def test_confirm_reports_a_race_of_a_child_process(tmp_path, run_confirm):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "work.py").write_text(CONFIRM_WORK)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_work.py").write_text(CONFIRM_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\ntestpaths = tests\n")
    done = run_confirm(tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    (missing_wait,) = [finding for finding in document["findings"] if finding["code"] == "CSL101"]
    assert missing_wait["verdict"] == "confirmed"  # by the child's race: the test itself touches no tensor
    assert missing_wait["tests"] == ["tests/test_work.py::test_child_reads_on_a_side_stream"]
    race = missing_wait["runtime_report"]
    assert race["kind"] == "read-after-write"
    assert race["child"]["argv"][1:3] == ["-c", "from app.work import side_read; side_read()"]
    assert race["current"]["stack"][-1]["file"] == str(tmp_path / "app" / "work.py")
    assert race["current"]["stack"][-1]["line"] == line_of("        return a * 2", CONFIRM_WORK)
    text = run_confirm(tmp_path, output="text")
    assert text.returncode == 1, text.stderr
    assert "CSL101 confirmed" in text.stdout and "[the race: in child process " in text.stdout


def test_a_child_outliving_its_parents_directory_says_its_race_on_stderr(tmp_path, capsys):
    from csan_lint.runtime.child_races import ChildWriter

    ChildWriter(str(tmp_path / "gone"), os.getpid()).internal_error("the sanitizer did not start")
    said = capsys.readouterr().err
    assert "cannot take this child's report" in said and '"message": "the sanitizer did not start"' in said
