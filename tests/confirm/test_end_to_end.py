"""`csan-lint --confirm` on the fixture project, for real: the linter, the selection, the
sanitizer plugin on the emulated device, a crashing test. Every verdict is asserted exactly.

fixture_project/app: racy.py races (confirmed), safe.py is flagged but synced by a helper in
another module (dismissed), legacy.py is called only by a test that opts out of the sanitizer
(unexercised),
crashy.py is reached only by a test that then kills its process (error). tests/test_racy.py
also races in its own code, which is not linted (runtime-only); tests/test_unrelated.py
imports nothing flagged and must not run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from csan_lint.lint.registry import rule_by_code

pytest.importorskip("torch")

FIXTURE = Path(__file__).parent / "fixture_project"


@pytest.fixture(scope="module")
def confirm(run_confirm):
    def run(project, *options):
        # No fixture test hangs: the limit only has to stay above what a loaded machine takes,
        # or a crashed worker's test reads as timed out instead.
        done = run_confirm(project, "--timeout", "120", *options)
        assert done.stdout, done.stderr
        return done.returncode, json.loads(done.stdout), done.stderr

    return run


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("fixture_project")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def run(project, confirm):
    return confirm(project)


def by_file(document):
    found: dict[str, list[dict]] = {}
    for finding in document["findings"]:
        found.setdefault(finding["path"], []).append(finding)
    return found


def test_every_flagged_module_has_findings(run):
    _, document, _ = run
    assert sorted(by_file(document)) == ["app/crashy.py", "app/legacy.py", "app/racy.py", "app/safe.py"]


def test_racy_is_confirmed_with_the_runtime_report(run):
    _, document, _ = run
    for finding in by_file(document)["app/racy.py"]:
        assert finding["verdict"] == "confirmed"
        assert finding["tests"] == ["tests/test_racy.py::test_shifted"]
        report = finding["runtime_report"]
        assert report["kind"] in rule_by_code(finding["code"]).confirmed_by
        lines = {
            frame["line"]
            for side in ("current", "previous")
            for frame in report[side]["stack"]
            if frame["file"].endswith("app/racy.py")
        }
        assert lines & set(range(finding["span"]["start_line"], finding["span"]["end_line"] + 1))


def test_safe_is_dismissed_by_the_three_tests_that_ran_it(run):
    _, document, _ = run
    for finding in by_file(document)["app/safe.py"]:
        assert finding["verdict"] == "dismissed"
        assert finding["reason"] == f"line {finding['line']} ran in 3 tests, no race touched it"
        assert finding["tests"] == [
            "tests/test_safe.py::test_shifted",
            "tests/test_safe.py::test_shifted_sizes[1]",
            "tests/test_safe.py::test_shifted_sizes[3]",
        ]
        assert finding["runtime_report"] is None


def test_legacy_is_unexercised(run):
    _, document, _ = run
    for finding in by_file(document)["app/legacy.py"]:
        assert finding["verdict"] == "unexercised"
        assert finding["reason"] == f"no test reached line {finding['line']}"
        assert finding["tests"] == []


def test_crashy_is_an_error_naming_the_crash(run):
    _, document, _ = run
    for finding in by_file(document)["app/crashy.py"]:
        assert finding["verdict"] == "error"
        assert finding["reason"] == (
            "tests/test_crashy.py::test_shifted_then_dies crashed: the test process was killed by SIGKILL"
        )
        assert finding["tests"] == ["tests/test_crashy.py::test_shifted_then_dies"]


def test_the_race_in_unlinted_test_code_is_runtime_only(run):
    _, document, _ = run
    (entry,) = document["runtime_only"]
    assert (entry["code"], entry["kind"], entry["path"]) == ("CSL901", "read-after-write", "tests/test_racy.py")
    assert entry["tests"] == ["tests/test_racy.py::test_race_in_unlinted_code"]
    source = (FIXTURE / "tests" / "test_racy.py").read_text().splitlines()
    assert source[entry["line"] - 1].strip() == "z = y - 1"


def test_only_the_tests_that_import_flagged_code_ran(run):
    _, document, _ = run
    assert document["test_files"] == ["tests/test_crashy.py", "tests/test_racy.py", "tests/test_safe.py"]
    assert document["device"] == "emulated"
    outcomes = {test["nodeid"]: test["outcome"] for test in document["tests"]}
    assert outcomes == {
        "tests/test_crashy.py::test_shifted_then_dies": "crashed",
        "tests/test_crashy.py::test_after_the_crash_still_runs": "passed",
        "tests/test_racy.py::test_shifted": "passed",
        "tests/test_racy.py::test_race_in_unlinted_code": "passed",
        "tests/test_safe.py::test_shifted": "passed",
        "tests/test_safe.py::test_shifted_sizes[1]": "passed",
        "tests/test_safe.py::test_shifted_sizes[3]": "passed",
        "tests/test_safe.py::test_unchecked_run_of_legacy": "passed",
        "<outside any test>": "passed",  # the app modules' imports and defs, at collection
    }


def test_summary_and_exit_code(run):
    code, document, _ = run
    assert document["summary"] == {
        "confirmed": 1,
        "other-race": 0,
        "dismissed": 1,
        "unexercised": 1,
        "error": 1,
        "runtime_only": 1,
        "tests_failed": 1,
        "not_shown": {"ignored": 0, "suppressed": 0, "baseline": 0},
    }
    assert code == 1
    (crash,) = document["failures"]  # the SIGKILL test crashes without the sanitizer too
    assert crash == {
        "nodeid": "tests/test_crashy.py::test_shifted_then_dies",
        "outcome": "crashed",
        "reason": "the test process was killed by SIGKILL",
        "cause": "also-without-the-sanitizer",
        "unchecked_outcome": "crashed",
    }


def test_two_xdist_workers_give_the_same_verdicts(run, project, confirm):
    """The crash kills a worker, not the run: xdist goes on, the crashed test is still an error."""
    code, document, _ = run
    code_n2, document_n2, _ = confirm(project, "-n", "2")

    def verdicts(found):
        return [(f["path"], f["line"], f["code"], f["verdict"], f["tests"]) for f in found["findings"]]

    def places(found):
        return [(entry["code"], entry["path"], entry["line"], entry["tests"]) for entry in found["runtime_only"]]

    assert verdicts(document_n2) == verdicts(document)
    assert places(document_n2) == places(document)
    (crashy,) = [f for f in document_n2["findings"] if f["path"] == "app/crashy.py"]
    assert crashy["reason"] == "tests/test_crashy.py::test_shifted_then_dies crashed: its pytest-xdist worker died"
    assert code_n2 == code == 1


def test_a_keyword_runs_only_the_selected_tests_it_matches(project, confirm):
    _, document, _ = confirm(project, "-k", "racy and shifted")
    ran = {test["nodeid"] for test in document["tests"]} - {"<outside any test>"}
    assert ran == {"tests/test_racy.py::test_shifted"}
    (racy,) = [f for f in document["findings"] if f["path"] == "app/racy.py"]
    assert racy["verdict"] == "confirmed"
