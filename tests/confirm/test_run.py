"""The runner against the real sanitizer plugin on the emulated device: outcomes, lines reached
per test, and a hung test and a test file that kills its process on import, each costing only
itself."""

from __future__ import annotations

import os

import pytest

from csan_lint.lint.model import Span
from csan_lint.runtime.confirm_run import OUTSIDE_TESTS, Runner, RunSettings, _Pass, short_reason
from csan_lint.runtime.confirm_verdict import FAILED, PASSED, TIMED_OUT

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # three pytest processes and an 8 s timeout

MODULE = """\
import torch


def work(x):
    y = x + 1
    return y


LIMIT = 3
"""

TESTS = """\
import pathlib
import time

import pytest
import torch

import mod

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_a_passes():
    mod.work(torch.ones(1, device="cuda"))


def test_b_hangs():
    mod.work(torch.ones(1, device="cuda"))
    once = pathlib.Path(__file__).with_name("hung-once")
    if not once.exists():  # hangs the first time only: the traced re-run alone then passes
        once.touch()
        time.sleep(120)


def test_c_fails():
    mod.work(torch.ones(1, device="cuda"))
    assert False, "wrong numbers"


def test_d_after_the_hang():
    assert torch.ones(1, device="cuda").is_cuda
"""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (root / "mod.py").write_text(MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "test_mod.py").write_text(TESTS)
    (root / "tests" / "test_broken.py").write_text("import mod\nimport module_that_does_not_exist\n")
    (root / "tests" / "test_dies.py").write_text("import os\nimport signal\n\nos.kill(os.getpid(), signal.SIGKILL)\n")
    workdir = tmp_path_factory.mktemp("work")
    seen: list[tuple[int, int]] = []
    cwd = os.getcwd()
    os.chdir(root)
    try:
        # The timeout must exceed the slowest real test on a loaded 2-core machine.
        runner = Runner(RunSettings("emulated", 8.0, workdir), lambda done, total: seen.append((done, total)))
        spans = {os.path.realpath("mod.py"): [Span(4, 6)]}
        result = runner.run(["tests/test_dies.py", "tests/test_mod.py", "tests/test_broken.py"], spans)
    finally:
        os.chdir(cwd)
    return result, seen, runner, os.path.realpath(root / "mod.py"), root


def test_each_test_has_its_outcome_and_the_lines_it_ran(outcome):
    result, _, runner, mod, _ = outcome
    tests = result.tests
    assert runner.device == "emulated"
    assert tests["tests/test_mod.py::test_a_passes"].outcome == PASSED
    assert tests["tests/test_mod.py::test_a_passes"].reached[mod] == {5, 6}
    assert tests["tests/test_mod.py::test_c_fails"].outcome == FAILED
    assert tests["tests/test_mod.py::test_c_fails"].reason == "AssertionError: wrong numbers"
    assert tests["tests/test_mod.py::test_d_after_the_hang"].outcome == PASSED
    assert mod not in tests["tests/test_mod.py::test_d_after_the_hang"].reached


def test_module_level_lines_count_as_run_outside_any_test(outcome):
    result, _, _, mod, _ = outcome
    assert {1, 4, 9} <= result.tests[OUTSIDE_TESTS].reached[mod]
    assert 5 not in result.tests[OUTSIDE_TESTS].reached[mod]


def test_a_hung_test_is_killed_and_what_it_reached_is_still_known(outcome):
    result, _, _, mod, _ = outcome
    hung = result.tests["tests/test_mod.py::test_b_hangs"]
    assert hung.outcome == TIMED_OUT
    assert hung.reason == "no result after 8 s"
    assert hung.reached[mod] == {5, 6}


def test_test_files_that_fail_or_die_on_import_are_reported(outcome):
    result, _, _, _, root = outcome
    assert result.broken_files == {
        os.path.realpath(root / "tests" / "test_dies.py"): "the test process was killed by SIGKILL while importing it",
        os.path.realpath(
            root / "tests" / "test_broken.py"
        ): "ModuleNotFoundError: No module named 'module_that_does_not_exist'",
    }


def test_progress_counts_every_test_once(outcome):
    _, seen, _, _, _ = outcome
    assert [done for done, _ in seen] == [1, 2, 3, 4]
    assert seen[-1][1] == 4


def test_short_reason_keeps_the_error_line():
    text = (
        "def test():\n>       assert x == 1, 'bad x'\nE       AssertionError: bad x\nE       assert 2 == 1\n"
        "\ntests/t.py:3: AssertionError"
    )
    assert short_reason(text) == "AssertionError: bad x"
    assert short_reason("Skipped: no") == "Skipped: no"
    assert short_reason(None) is None


def test_a_race_outside_any_test_is_kept_and_named_so():
    record = _Pass()
    record.take({"type": "session", "rootdir": "/project"}, 0.0)
    record.take({"type": "race", "nodeid": None, "report": {"kind": "read-after-write"}}, 0.0)
    record.take({"type": "test-start", "nodeid": "tests/test_a.py::test_x"}, 1.0)
    assert [Runner._display(record, nodeid) for nodeid, _ in record.races] == [OUTSIDE_TESTS]
    assert record.in_progress() == ["tests/test_a.py::test_x"]
