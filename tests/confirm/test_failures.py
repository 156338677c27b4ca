"""A test that does not pass fails `--confirm`, with its cause: its own failure (it fails without
the sanitizer too), one only under the sanitizer, or the emulated device's gap (exit 2).

failing_project/ has no race: any exit status other than 0 comes from its failing tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from csan_lint.runtime.confirm_verdict import (
    ALSO_UNCHECKED,
    EMULATION_GAP,
    NOT_COLLECTED,
    NOT_RERUN,
    ONLY_CHECKED,
    SANITIZER_ERROR,
    RunResult,
    TestRun,
    failures_of,
    failures_status,
    needs_unchecked_run,
)

FIXTURE = Path(__file__).parent / "failing_project"
OWN = "tests/test_offload.py::test_own_failure"
ONLY = "tests/test_offload.py::test_fails_only_under_the_sanitizer"
GAP = "tests/test_offload.py::test_emulation_gap"


def test_each_failure_gets_its_cause_from_the_run_without_the_sanitizer():
    run = RunResult(
        tests={
            test.nodeid: test
            for test in [
                TestRun("t.py::ok", "passed"),
                TestRun("t.py::own", "failed", "ValueError: boom"),
                TestRun("t.py::only", "timeout", "no result after 60 s"),
                TestRun("t.py::gap", "failed", "RuntimeError: x", gap="the emulated device does not support X"),
                TestRun("t.py::internal", "internal-error", "sanitizer internal error: KeyError"),
                TestRun("t.py::lost", "crashed", "killed"),
            ]
        },
        races=[],
        broken_files={"/abs/t_broken.py": "ImportError: nope"},
    )
    rerun = [test.nodeid for test in run.tests.values() if needs_unchecked_run(test)]
    assert rerun == ["t.py::own", "t.py::only", "t.py::lost"]
    unchecked = {"t.py::own": TestRun("t.py::own", "failed"), "t.py::only": TestRun("t.py::only", "passed")}
    failures = failures_of(run, unchecked)
    assert [(f.nodeid, f.cause, f.unchecked) for f in failures] == [
        ("/abs/t_broken.py", NOT_COLLECTED, None),
        ("t.py::own", ALSO_UNCHECKED, "failed"),
        ("t.py::only", ONLY_CHECKED, "passed"),
        ("t.py::gap", EMULATION_GAP, None),
        ("t.py::internal", SANITIZER_ERROR, None),
        ("t.py::lost", NOT_RERUN, None),
    ]
    assert failures[3].reason == "the emulated device does not support X"
    assert failures_status(failures) == 2  # a gap or our error: the check could not be made
    assert failures_status([f for f in failures if f.cause not in (EMULATION_GAP, SANITIZER_ERROR)]) == 1
    assert failures_status([]) == 0


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("failing_project")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.slow
def test_every_failure_is_reported_with_its_cause_and_a_gap_exits_2(project, run_confirm):
    done = run_confirm(project, "--timeout", "60")
    assert done.returncode == 2, done.stderr
    document = json.loads(done.stdout)
    failures = {failure["nodeid"]: failure for failure in document["failures"]}
    assert sorted(failures) == sorted([OWN, ONLY, GAP])
    assert failures[OWN] == {
        "nodeid": OWN,
        "outcome": "failed",
        "reason": "ValueError: the test's own bug",  # the type and the message's first line
        "cause": ALSO_UNCHECKED,
        "unchecked_outcome": "failed",
    }
    assert (failures[ONLY]["cause"], failures[ONLY]["unchecked_outcome"]) == (ONLY_CHECKED, "passed")
    assert failures[ONLY]["reason"] == "AssertionError: the sanitizer is listening"
    assert failures[GAP]["cause"] == EMULATION_GAP
    assert failures[GAP]["reason"].startswith(
        "the emulated device does not support interprocess events (`torch.cuda.Event.ipc_handle`), "
        "called as `event.ipc_handle()` at test_offload.py:"
    )
    assert failures[GAP]["reason"].endswith(": please report it (https://github.com/csan-lint/csan-lint/issues)")
    assert document["summary"]["tests_failed"] == 3
    assert "Running the 2 failed test(s) again without the sanitizer" in done.stderr


@pytest.mark.slow
def test_the_tests_own_failure_fails_the_run_even_with_exit_zero(project, run_confirm):
    done = run_confirm(project, "--timeout", "60", "--exit-zero", "-k", "own", output="text")
    assert done.returncode == 1, done.stderr  # as pytest: a failed test is exit 1
    lines = done.stdout.splitlines()
    assert (
        f"FAILED {OWN} - ValueError: the test's own bug [also without the sanitizer (failed): the test's own failure]"
        in lines
    )
    assert "failed  1 did not pass: 1 also-without-the-sanitizer" in lines


@pytest.mark.slow
def test_a_failure_only_under_the_sanitizer_fails_the_run(project, run_confirm):
    done = run_confirm(project, "--timeout", "60", "-k", "only", output="text")
    assert done.returncode == 1, done.stderr
    assert (
        f"FAILED {ONLY} - AssertionError: the sanitizer is listening [only under the sanitizer: passed without it]"
        in done.stdout.splitlines()
    )


@pytest.mark.slow
def test_only_passing_tests_exit_0(project, run_confirm):
    done = run_confirm(project, "--timeout", "60", "-k", "passes")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failures"] == []
