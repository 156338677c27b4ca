"""Cache benchmark: `csan-lint` over the installed torch package, cold (empty cache), warm
(nothing changed: a stat per file), after `touch`ing every file (same bytes, new mtimes: a read
and a hash per file, no parse) and with `--no-cache`. Each run is a fresh process, as a user
runs it, so start-up is included. Prints wall and CPU seconds and the warm/cold ratio next to the
target (warm at least 10x faster); timings depend on the machine: printed, never asserted.

    python benchmarks/cache_bench.py [--torch-root DIR] [--repeat N]

Works on a copy of the tree's Python files in a temporary directory (a benchmark should not
touch the installed package), and, unless `--installed`, runs a snapshot of this checkout
(`pip install --no-deps --target`): the cache key holds a fingerprint of the analysis sources, so
in a checkout being edited meanwhile every run would rightly start cold.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from torch_tree import default_torch_root

WARM_SPEEDUP_TARGET = 10.0


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    """User + system seconds of the csan-lint process (and its worker pool)."""

    def __str__(self) -> str:
        return f"wall {self.wall:6.2f} s  cpu {self.cpu:6.2f} s"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def snapshot(destination: Path) -> dict[str, str]:
    """This checkout installed into `destination`; the environment that runs it first."""
    repository = Path(__file__).resolve().parent.parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(destination),
            str(repository),
        ],
        check=True,
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(destination), os.environ.get("PYTHONPATH")]))}


def lint(tree: Path, cwd: Path, environment: dict[str, str] | None, *options: str) -> Timing:
    start, start_cpu = time.perf_counter(), _children_cpu()
    completed = subprocess.run(
        [sys.executable, "-m", "csan_lint", "--exit-zero", "-q", *options, str(tree)],
        cwd=cwd,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    timing = Timing(time.perf_counter() - start, _children_cpu() - start_cpu)
    if completed.returncode not in (0, 2):  # 2: some file could not be checked, still a full run
        raise SystemExit(f"csan-lint failed ({completed.returncode}): {completed.stderr[-2000:]}")
    return timing


def best(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(t.wall for t in runs), statistics.median(t.cpu for t in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="warm, touched and no-cache runs (median)")
    parser.add_argument("--installed", action="store_true", help="run the installed csan-lint, not a snapshot")
    arguments = parser.parse_args()
    source = arguments.torch_root or default_torch_root()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        environment = None if arguments.installed else snapshot(work / "snapshot")
        tree = work / "torch"
        files = []
        for path in sorted(source.rglob("*.py")):
            copy = tree / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
            files.append(copy)
        # Age the copies so that their stats are trusted at once (a just-written file is hashed).
        old = time.time() - 3600
        for path in files:
            os.utime(path, (old, old))
        cold = lint(tree, work, environment)
        warm = best([lint(tree, work, environment) for _ in range(arguments.repeat)])
        touched_runs = []
        for _ in range(arguments.repeat):
            old -= 60
            for path in files:
                os.utime(path, (old, old))
            touched_runs.append(lint(tree, work, environment))
        touched = best(touched_runs)
        uncached = best([lint(tree, work, environment, "--no-cache") for _ in range(arguments.repeat)])
        size = sum(path.stat().st_size for path in (work / ".csan_lint_cache").glob("results-*.json"))
    print(f"torch tree: {len(files)} files, {source}")
    print(f"cold (empty cache)           {cold}")
    print(
        f"warm (nothing changed)       {warm}   {cold.wall / warm.wall:5.1f}x faster than cold"
        f" (target {WARM_SPEEDUP_TARGET:.0f}x)"
    )
    print(f"touched (same bytes)         {touched}   {cold.wall / touched.wall:5.1f}x faster than cold")
    print(f"--no-cache                   {uncached}")
    print(f"cache file: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
