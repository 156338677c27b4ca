"""`examples/EXPECTED.md` says which verdict each example finding is meant to get from
`csan-lint --confirm`, and which races only the sanitizer finds: run it on the emulated device
and hold the table to it, so the demo's documentation cannot drift from what the product does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FINDING_ROW = re.compile(
    r"^\|\s*`(?P<file>[\w.]+):(?P<line>\d+)`\s*\|\s*(?P<code>\w+)\s*\|\s*(?P<verdict>[a-z-]+)\s*\|"
)
RUNTIME_ONLY_ROW = re.compile(r"^\|\s*`(?P<file>[\w.]+)`,\s*`[^`]+`\s*\|\s*(?P<kind>[a-z-]+)\s*\|")


def table(pattern: re.Pattern[str]) -> list[re.Match[str]]:
    lines = (EXAMPLES / "EXPECTED.md").read_text().splitlines()
    return [match for line in lines if (match := pattern.match(line))]


@pytest.fixture(scope="module")
def confirmed() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "csan_lint", "examples/", "--confirm", "--device", "emulated", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # races were confirmed
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_each_finding_gets_its_intended_verdict(confirmed: dict[str, Any]) -> None:
    intended = {
        (f"examples/{row['file']}", int(row["line"]), row["code"]): row["verdict"] for row in table(FINDING_ROW)
    }
    got = {(finding["path"], finding["line"], finding["code"]): finding["verdict"] for finding in confirmed["findings"]}
    assert got == intended


def test_runtime_only_races_are_the_listed_ones(confirmed: dict[str, Any]) -> None:
    listed = {(row["file"], row["kind"]) for row in table(RUNTIME_ONLY_ROW)}
    assert listed, "no runtime-only rows in EXPECTED.md"
    seen_in_modules = set()
    for race in confirmed["runtime_only"]:
        report = race["runtime_report"]
        frames = [
            Path(frame["file"]).name
            for side in (report["current"], report.get("previous") or {}, report["allocation"])
            for frame in side.get("stack", ())
        ]
        assert any((name, race["kind"]) in listed for name in frames), race["message"]
        path = Path(race["path"])
        if path.parent.name == "examples":
            seen_in_modules.add((path.name, race["kind"]))
    assert seen_in_modules == listed
