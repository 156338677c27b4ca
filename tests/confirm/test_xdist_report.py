"""`pytest --csan -n 2 --csan-report PATH`: each worker's lines land in PATH whole (no
interleaving, no truncation by another worker), and the races are the ones a single process finds."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")
pytestmark = pytest.mark.slow  # pytest subprocesses with two workers that import torch

RACY_TESTS = """
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("n", range(6))
def test_racy(n):
    a = torch.ones(4 + n, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        a.mul_(2)
    torch.cuda.synchronize()
"""


def run(pytester: pytest.Pytester, *options: str) -> list[dict]:
    report = pytester.path / "csan.jsonl"
    pytester.runpytest_subprocess(
        "--csan", "--csan-device", "emulated", "--csan-report-only", f"--csan-report={report}", *options
    )
    return [json.loads(line) for line in report.read_text().splitlines()]


def blocks(records: list[dict]) -> list[list[dict]]:
    """The records cut at each session record: one block per process that ran tests."""
    found: list[list[dict]] = []
    for record in records:
        if record["type"] == "session":
            found.append([])
        found[-1].append(record)
    return found


def test_each_worker_part_is_merged_whole_and_the_races_match_one_process(pytester: pytest.Pytester):
    pytester.makepyfile(test_racy=RACY_TESTS)
    merged = run(pytester, "-n", "2")
    assert sorted(path.name for path in pytester.path.iterdir() if path.name.startswith("csan.jsonl")) == ["csan.jsonl"]
    parts = blocks(merged)
    assert sorted(block[0]["worker"] for block in parts) == ["gw0", "gw1"]
    for block in parts:
        running = None
        for record in block[1:]:  # one worker runs one test at a time: start, its races, end
            if record["type"] == "test-start":
                assert running is None
                running = record["nodeid"]
            elif record["type"] == "test-end":
                assert record["nodeid"] == running
                running = None
            else:
                assert record["nodeid"] == running
    alone = run(pytester, "-n", "0")
    assert [block[0].get("worker") for block in blocks(alone)] == [None]

    def races(records):
        return sorted((record["nodeid"], record["report"]["kind"]) for record in records if record["type"] == "race")

    assert races(merged) == races(alone) and len(races(alone)) == 6
