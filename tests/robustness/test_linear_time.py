"""Linting time grows linearly with the size of a file, and a file that takes too long becomes a
located diagnostic of its own while the rest of the run goes on.

Time is compared only with itself in the same run (CPU time, the best of a few runs), never
with an absolute figure: the machine may be slow or busy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import csan_lint_robustness_workloads as workloads  # loaded by this directory's conftest.py
from csan_lint.lint.engine import lint_source
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell import runner
from csan_lint.lint.shell.budget import can_enforce
from csan_lint.lint.shell.config import load_config

SMALL, LARGE = 1_000, 16_000
MAX_PER_LINE_GROWTH = 2.5
"""CPU time per line may grow this much from the small file to the large one: the analysis
measures about 1.5 (memory effects: a larger heap for the collector and the caches); with a
search of the whole text per function (the quadratic bug this guards) it was 5.4."""


def _cpu_seconds(source: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        lint_source(source, "generated.py")
        best = min(best, time.process_time() - start)
    return best


def test_time_per_line_stays_flat_from_1k_to_16k_lines_of_stream_blocks() -> None:
    small, large = workloads.dense_stream_module(SMALL), workloads.dense_stream_module(LARGE)
    assert large.count("with torch.cuda.stream(s):") >= 16 * small.count("with torch.cuda.stream(s):") - 16
    per_line_small = _cpu_seconds(small, repeat=5) / small.count("\n")
    per_line_large = _cpu_seconds(large, repeat=2) / large.count("\n")
    growth = per_line_large / per_line_small
    assert growth < MAX_PER_LINE_GROWTH, f"CPU time per line grew {growth:.2f}x from {SMALL} to {LARGE} lines"


@pytest.mark.skipif(not can_enforce(), reason="no CPU-time timer on this platform")
def test_a_file_over_the_analysis_budget_is_a_located_diagnostic_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "generated.py").write_text(workloads.dense_stream_module(LARGE))
    buggy = all_rules()[0]
    (tmp_path / "later.py").write_text(buggy.INVALID[0].code)
    (tmp_path / "broken.py").write_text("def f(:\n")
    monkeypatch.setattr(runner, "ANALYSIS_BUDGET_S", 0.2)
    result = runner.lint_paths([str(tmp_path)], load_config([str(tmp_path)]), jobs=1)
    by_file = {Path(finding.path).name: finding for finding in result.findings}
    over = by_file["generated.py"]
    assert (over.code, over.line, over.column) == (runner.BUDGET_CODE, 1, 1)
    assert "analysis budget exceeded" in over.message and "0.2 s" in over.message
    assert by_file["later.py"].code == buggy.code  # the other files were still checked
    assert by_file["broken.py"].code == "CSL001"
    assert result.files_checked == 3 and result.has_tool_errors
