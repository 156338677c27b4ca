"""`csan-lint --confirm` on a project whose linter pass has no finding: its tests still run
because they reach stream code, and the race is reported as runtime-only at the racing line.
tests/test_capture.py's first test leaves the offload stream current (a capture that raised
inside `torch.cuda.graph`); the second test's race is still found and the leak is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # two --confirm runs, each a pytest process importing torch

PROJECT = Path(__file__).parent / "unflagged_project"
OFFLOAD_TEST = "tests/test_offload.py::test_offload_reads_an_activation_made_on_the_current_stream"
CAPTURE_TEST = "tests/test_capture.py::test_a_capture_on_the_offload_stream_raises"
AFTER_CAPTURE_TEST = "tests/test_capture.py::test_b_offload_after_the_failed_capture"


def line_of(path: str, text: str) -> int:
    lines = (PROJECT / path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_confirm):
    root = tmp_path_factory.mktemp("unflagged_project")
    shutil.copytree(PROJECT, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    found = {}
    for workers in ("0", "2"):
        done = run_confirm(root, "-n", workers)
        assert done.stdout, done.stderr
        found[workers] = done.returncode, json.loads(done.stdout)
    return found


def sites(document: dict) -> list[tuple]:
    return sorted(
        (entry["code"], entry["path"], entry["line"], tuple(entry["tests"])) for entry in document["runtime_only"]
    )


def test_the_race_no_finding_predicted_is_runtime_only_at_the_racing_line_and_fails(runs):
    code, document = runs["0"]
    assert document["findings"] == []
    copy_line = line_of("app/offload.py", "activation.to(")
    assert sites(document) == [
        ("CSL901", "app/offload.py", copy_line, (AFTER_CAPTURE_TEST,)),
        ("CSL901", "app/offload.py", copy_line, (OFFLOAD_TEST,)),
        ("CSL908", "tests/test_capture.py", line_of("tests/test_capture.py", "torch.cuda.graph("), (CAPTURE_TEST,)),
    ]
    (after_capture,) = [entry for entry in document["runtime_only"] if entry["tests"] == [AFTER_CAPTURE_TEST]]
    previous = after_capture["runtime_report"]["previous"]["stack"][-1]
    assert (Path(previous["file"]).name, previous["line"]) == (
        "test_capture.py",
        line_of("tests/test_capture.py", "* 3"),
    )
    assert code == 1


def test_the_stream_the_failed_capture_left_current_is_named(runs):
    _, document = runs["0"]
    assert [leak["nodeid"] for leak in document["stream_leaks"]] == [CAPTURE_TEST]


def test_two_xdist_workers_give_the_same_places_and_exit_status(runs):
    (code, document), (code_n2, document_n2) = runs["0"], runs["2"]
    assert sites(document_n2) == sites(document)
    assert sorted(test["nodeid"] for test in document_n2["tests"]) == sorted(
        test["nodeid"] for test in document["tests"]
    )
    assert code_n2 == code == 1
