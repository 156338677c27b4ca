"""The verdict rules on plain data: matching by position and kind, coverage, broken runs."""

from __future__ import annotations

import os

import pytest

from csan_lint.lint.model import Finding, Span
from csan_lint.runtime import confirm_verdict, kinds
from csan_lint.runtime.confirm_verdict import (
    CONFIRMED,
    CRASHED,
    DISMISSED,
    ERROR,
    FAILED,
    OTHER_RACE,
    PASSED,
    SKIPPED,
    UNEXERCISED,
    Race,
    RunResult,
    TestRun,
    decide,
)


class _Rule:
    code = "CSL101"
    confirmed_by = (kinds.READ_AFTER_WRITE,)


class _FreeRule:
    code = "CSL201"
    confirmed_by = (kinds.FREE_IN_USE,)


@pytest.fixture(autouse=True)
def rules(monkeypatch):
    """Two rules with known `confirmed_by`, whatever the real catalog declares."""
    table = {rule.code: rule for rule in (_Rule, _FreeRule)}
    monkeypatch.setattr(confirm_verdict, "rule_by_code", table.get)


@pytest.fixture
def src(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text("\n" * 40)
    return os.path.realpath(tmp_path / "mod.py")


def finding(start: int, end: int, code: str = "CSL101", line: int | None = None, message: str = "m") -> Finding:
    """A finding at `line` (default: the block's first line) in the block `start`-`end`."""
    line = start if line is None else line
    return Finding("mod.py", line, 5, code, message, line, 9, Span(start, end))


def race(path: str, line: int, kind: str = kinds.READ_AFTER_WRITE, previous_line: int = 1, alloc_line: int = 2):
    def stack(at: int) -> list[dict]:
        return [{"file": path, "line": at, "function": "f"}]

    return {
        "kind": kind,
        "message": "a race",
        "allocation": {"ptr": 0, "size": 4, "stream": 0, "stack": stack(alloc_line)},
        "current": {"stream": 7, "operator": "aten::add", "argument": "self", "is_write": False, "stack": stack(line)},
        "previous": {
            "stream": 0,
            "operator": "aten::mul",
            "argument": "out",
            "is_write": True,
            "stack": stack(previous_line),
        },
    }


def ran(nodeid: str, path: str, lines: set[int], outcome: str = PASSED, reason: str | None = None) -> TestRun:
    return TestRun(nodeid, outcome, reason, {path: frozenset(lines)})


def test_race_at_the_finding_line_confirms(src):
    result = RunResult({"t::a": ran("t::a", src, {11})}, [Race("t::a", race(src, 11))])
    (verdict,), runtime_only = decide([finding(10, 12, line=11)], result, {src: frozenset({"t.py"})})
    assert (verdict.verdict, verdict.tests) == (CONFIRMED, ("t::a",))
    assert verdict.race["current"]["stack"][0]["line"] == 11
    assert runtime_only == []


def test_previous_access_at_the_finding_line_confirms_too(src):
    result = RunResult({}, [Race("t::a", race(src, 30, previous_line=12))])
    (verdict,), _ = decide([finding(10, 14, line=12)], result, {})
    assert verdict.verdict == CONFIRMED


def test_a_line_the_message_names_confirms(src):
    report = race(src, 30, kinds.FREE_IN_USE, previous_line=31)
    named = finding(10, 12, "CSL201", message="'x' was used on side stream 's', then deleted at line 30")
    (verdict,), _ = decide([named], RunResult({}, [Race("t::a", report)]), {})
    assert verdict.verdict == CONFIRMED


def test_same_kind_deep_in_the_block_but_away_from_its_lines_is_another_race(src):
    """`model(x)` on line 14 of a wide block races inside: that is not the finding's race."""
    deep = race(src, 35, previous_line=36)
    deep["current"]["stack"].insert(0, {"file": src, "line": 14, "function": "caller"})
    result = RunResult({"t::a": ran("t::a", src, {11, 14})}, [Race("t::a", deep)])
    (verdict,), runtime_only = decide([finding(10, 16, line=11)], result, {})
    assert verdict.verdict == OTHER_RACE
    runtime_only_code = kinds.code_of(kinds.READ_AFTER_WRITE)
    assert verdict.reason == (
        f"a read-after-write race at line 14 of its block, not at its lines: runtime-only {runtime_only_code}"
    )
    assert [entry.line for entry in runtime_only] == [35]


def test_a_finding_on_a_with_line_is_confirmed_by_an_op_made_in_its_block(src):
    """CSL502 flags `with torch.cuda.stream(side):` during capture: the block is its subject."""
    result = RunResult({}, [Race("t::a", race(src, 11))])
    (at_head,), _ = decide([finding(10, 12)], result, {})
    (inside,), _ = decide([finding(10, 12, line=12)], result, {})
    assert (at_head.verdict, inside.verdict) == (CONFIRMED, OTHER_RACE)


def test_race_of_another_kind_at_its_line_is_said_not_dismissed(src):
    result = RunResult({"t::a": ran("t::a", src, {11})}, [Race("t::a", race(src, 11, kinds.WRITE_AFTER_WRITE))])
    (verdict,), runtime_only = decide([finding(10, 12, line=11)], result, {})
    assert (verdict.verdict, verdict.tests) == (OTHER_RACE, ("t::a",))
    assert verdict.reason == "a write-after-write race at line 11: runtime-only CSL903"
    assert [(entry.code, entry.line) for entry in runtime_only] == [(kinds.code_of(kinds.WRITE_AFTER_WRITE), 11)]


def test_race_outside_the_span_is_runtime_only(src):
    result = RunResult(
        {"t::a": ran("t::a", src, {10}), "t::b": ran("t::b", src, set())},
        [
            Race("t::a", race(src, 20)),
            Race("t::b", race(src, 20)),
        ],
    )
    (verdict,), runtime_only = decide([finding(10, 12)], result, {})
    assert verdict.verdict == DISMISSED
    assert len(runtime_only) == 1 and runtime_only[0].tests == ("t::a", "t::b")


def test_the_allocation_site_alone_confirms_nothing(src):
    report = race(src, 30, kinds.FREE_IN_USE, previous_line=31, alloc_line=11)
    (verdict,), _ = decide([finding(10, 12, "CSL201", line=11)], RunResult({}, [Race("t::a", report)]), {})
    assert verdict.verdict == UNEXERCISED


def test_a_line_of_the_block_that_ran_does_not_dismiss_a_line_that_did_not(src):
    tests = {"t::a": ran("t::a", src, {10, 11})}
    (verdict,), _ = decide([finding(10, 14, line=13)], RunResult(tests, []), {src: frozenset({"t.py"})})
    assert verdict.verdict == UNEXERCISED


def test_a_finding_inside_a_statement_over_several_lines_ran_when_its_statement_did(src, tmp_path):
    (tmp_path / "mod.py").write_text("import torch\n\ny = torch.add(\n    1,\n    2,\n)\n")
    tests = {"t::a": ran("t::a", src, {1, 3})}
    (verdict,), _ = decide([finding(3, 6, line=5)], RunResult(tests, []), {})
    assert verdict.verdict == DISMISSED


def test_ran_without_race_is_dismissed_with_the_test_count(src):
    tests = {n: ran(n, src, {12}) for n in ("t::a", "t::b")} | {"t::c": ran("t::c", src, {13})}
    (verdict,), _ = decide([finding(10, 14, line=12)], RunResult(tests, []), {src: frozenset({"t.py"})})
    assert verdict.verdict == DISMISSED
    assert verdict.reason == "line 12 ran in 2 tests, no race touched it"
    assert verdict.tests == ("t::a", "t::b")


def test_never_reached_is_unexercised_and_says_which_lines(src, tmp_path):
    importer = os.path.realpath(tmp_path / "t.py")
    tests = {"t.py::a": ran("t.py::a", src, {20}), "t.py::b": TestRun("t.py::b", SKIPPED)}
    (verdict,), _ = decide([finding(10, 12)], RunResult(tests, []), {src: frozenset({importer})})
    assert verdict.verdict == UNEXERCISED
    assert verdict.reason == "no test reached line 10 (1 test that import it skipped)"


def test_not_imported_by_any_test_says_so(src):
    (verdict,), _ = decide([finding(10, 10)], RunResult({}, []), {})
    assert (verdict.verdict, verdict.reason) == (UNEXERCISED, "no test imports mod.py")


@pytest.mark.parametrize("outcome", [FAILED, CRASHED])
def test_broken_test_that_reached_the_block_gives_error(src, outcome):
    tests = {"t::a": ran("t::a", src, {10}, outcome, "boom"), "t::b": ran("t::b", src, {10})}
    (verdict,), _ = decide([finding(10, 12)], RunResult(tests, []), {})
    assert verdict.verdict == ERROR
    assert verdict.reason.startswith("t::a ") and "boom" in verdict.reason
    assert verdict.reason.endswith("(the block also ran cleanly in 1 test)")


def test_a_race_still_confirms_in_a_broken_test(src):
    tests = {"t::a": ran("t::a", src, {11}, CRASHED, "killed")}
    (verdict,), _ = decide([finding(10, 12, line=11)], RunResult(tests, [Race("t::a", race(src, 11))]), {})
    assert verdict.verdict == CONFIRMED


def test_test_file_that_failed_to_collect_gives_error_to_what_it_imports(src, tmp_path):
    broken = os.path.realpath(tmp_path / "test_x.py")
    result = RunResult({}, [], broken_files={broken: "ImportError: nope"})
    (verdict,), _ = decide([finding(10, 12)], result, {src: frozenset({broken})})
    assert verdict.verdict == ERROR
    assert verdict.reason == "test_x.py could not be collected: ImportError: nope"


def test_finding_of_no_rule_is_an_error_not_a_guess(src):
    (verdict,), _ = decide([finding(1, 1, "CSL001")], RunResult({}, []), {})
    assert verdict.verdict == ERROR


def test_a_runtime_only_free_with_no_user_frame_is_placed_at_its_allocation(src):
    report = race(src, 20, kinds.FREE_IN_USE, alloc_line=7)
    report["current"]["stack"] = [
        {"file": os.path.join(os.path.dirname(os.__file__), "threading.py"), "line": 1, "function": "f"}
    ]
    _, (entry,) = decide([], RunResult({}, [Race("t::a", report)]), {})
    assert (entry.path, entry.line) == ("mod.py", 7)


def test_runtime_only_codes_cover_every_kind_once():
    codes = [kinds.code_of(kind) for kind in kinds.ALL_KINDS]
    assert len(set(codes)) == len(kinds.ALL_KINDS) and kinds.UNKNOWN_KIND_CODE not in codes
    assert kinds.code_of("a-kind-from-a-newer-sanitizer") == kinds.UNKNOWN_KIND_CODE


def test_races_between_the_same_lines_are_one_runtime_only_entry(src):
    first = race(src, 20, previous_line=5)
    second = {**race(src, 20, previous_line=5), "current": {**first["current"], "operator": "aten::std"}}
    third = race(src, 21, previous_line=5)
    result = RunResult({}, [Race("t::a", first), Race("t::a", second), Race("t::b", third)])
    _, runtime_only = decide([], result, {})
    assert [(entry.line, entry.tests) for entry in runtime_only] == [(20, ("t::a",)), (21, ("t::b",))]


def test_a_runtime_only_race_is_placed_inside_the_linted_paths(tmp_path, monkeypatch):
    """The sanitizer's site is the test's callback; the innermost frame under the linted path
    that is not a decorator's wrapper is where the race is listed."""
    monkeypatch.chdir(tmp_path)
    app, tests = tmp_path / "app", tmp_path / "tests"
    app.mkdir()
    tests.mkdir()
    library, deprecation, test = str(app / "lib.py"), str(app / "deprecation.py"), str(tests / "test_a.py")
    report = race(test, 30)
    report["current"]["stack"] = [
        {"file": test, "line": 5, "function": "test_a"},
        {"file": library, "line": 12, "function": "run"},
        {"file": deprecation, "line": 40, "function": "wrapped", "wrapper": True},
        {"file": test, "line": 30, "function": "<lambda>"},
    ]
    report["site"] = {"access": "current", "file": test, "line": 30, "function": "<lambda>"}
    result = RunResult({}, [Race("tests/test_a.py::test_a", report)])
    (placed,) = decide([], result, {}, [str(app)])[1]
    assert (placed.path, placed.line) == ("app/lib.py", 12)
    (unlinted,) = decide([], result, {}, [str(tmp_path / "elsewhere")])[1]
    assert (unlinted.path, unlinted.line) == ("tests/test_a.py", 30)
    report["site"] = {"access": "previous", "file": test, "line": 1, "function": "f"}  # a free by the library
    (at_use,) = decide([], result, {}, [])[1]
    assert (at_use.path, at_use.line) == ("tests/test_a.py", 1)
