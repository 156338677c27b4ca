"""Static benchmark: csan-lint cold over the installed torch package next to `ruff check` of the
same tree, in the same run, each as its own command line would run it (a fresh process, its
own parallelism: csan-lint's process pool, ruff's threads, both over all CPUs).

csan-lint runs cold (`--no-cache`), ruff too (`--no-cache --isolated`: no cache, no config).
Both read and check every file; csan-lint's prefilter then hands only the files that may hold a
stream bug to libcst and the analysis, so its throughput is printed twice: over all the lines
it checked, and over the lines it actually parsed. The targets are printed next to the
measurements, not asserted: timings depend on the machine.

    python benchmarks/static_bench.py [--torch-root DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from torch_tree import default_torch_root

from csan_lint.lint.shell.files import might_have_findings

RUFF_RATIO_TARGET = 4.0
"""csan-lint's wall time over ruff's, whole torch package, cold, same run."""
WHOLE_PACKAGE_TARGET_S = 15.0
"""Cold lint of the whole torch package (about 1.2 M lines) on 2 cores."""


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    """CPU seconds of the command and its children (worker processes): unlike wall time,
    barely moved by other load on the machine."""

    def __str__(self) -> str:
        return f"{self.wall:5.2f} s wall, {self.cpu:5.2f} s CPU"


def timed(command: list[str]) -> tuple[Timing, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return Timing(wall, cpu), completed.stdout


def median(timings: list[Timing]) -> Timing:
    return Timing(statistics.median(t.wall for t in timings), statistics.median(t.cpu for t in timings))


def line_counts(root: Path) -> tuple[int, int]:
    """(all lines, lines of the files the prefilter passes to the parser) under `root`."""
    total = parsed = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_bytes().decode("utf-8", errors="replace")
        lines = text.count("\n")
        total += lines
        parsed += lines if might_have_findings(text) else 0
    return total, parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", type=Path, default=None, help="the torch package directory")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool, alternating; medians printed")
    args = parser.parse_args()
    root = (args.torch_root or default_torch_root()).resolve()
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        raise SystemExit("ruff not found: `pip install ruff` to compare with it")
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}  torch package: {root}")
    ours_command = [sys.executable, "-m", "csan_lint", "check", "--no-cache", "--output-format", "json", str(root)]
    ruff_command = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", "--quiet", str(root)]
    ours: list[Timing] = []
    theirs: list[Timing] = []
    report = ""
    for _ in range(args.repeat):
        timing, report = timed(ours_command)
        ours.append(timing)
        theirs.append(timed(ruff_command)[0])
    ours_median, ruff_median = median(ours), median(theirs)
    summary = json.loads(report)["summary"]
    internal = sum(1 for finding in json.loads(report)["findings"] if finding["code"] in ("CSL002", "CSL003", "CSL005"))
    total, parsed = line_counts(root)
    ratio = ours_median.wall / ruff_median.wall
    print(f"median of {args.repeat} runs each, alternating")
    print(f"csan-lint --no-cache:            {ours_median}")
    print(f"ruff check --no-cache --isolated: {ruff_median}")
    verdict = "met" if ratio <= RUFF_RATIO_TARGET else "MISSED"
    print(f"  csan-lint / ruff, wall: {ratio:.1f}x (target <= {RUFF_RATIO_TARGET:.0f}x: {verdict})")
    print(f"  csan-lint / ruff, CPU:  {ours_median.cpu / ruff_median.cpu:.1f}x")
    print(
        f"  csan-lint wall {ours_median.wall:.1f} s (target <= {WHOLE_PACKAGE_TARGET_S:.0f} s: "
        f"{'met' if ours_median.wall <= WHOLE_PACKAGE_TARGET_S else 'MISSED'}), internal errors: {internal}"
    )
    print(
        f"csan-lint: {summary['files_checked']} files checked, {summary['files_parsed']} parsed, "
        f"{summary['findings']} findings"
    )
    print(f"  lines: {total:,} checked, {parsed:,} parsed by libcst ({parsed / total:.1%})")
    print(
        f"  {total / ours_median.wall / 1000:,.0f} kLOC/s checked (wall), "
        f"{parsed / ours_median.wall / 1000:,.1f} kLOC/s parsed and analysed (wall)"
    )


if __name__ == "__main__":
    main()
