"""Project index benchmark: what the index costs a cold whole-torch run and a pre-commit run on
one changed file, against a baseline build (by default `main`: the linter without the project
index) and `ruff check`, all measured in the same run.

The torch package is copied into a temporary project (a `pyproject.toml` beside it, so that the
index covers it), once per build so that their caches stay apart. Each run is a fresh process
from the project root, as pre-commit runs the hook (`csan-lint check --force-exclude FILE`).

- cold: the whole package with an empty `.csan_lint_cache/` (the index built from scratch);
- pre-commit: after a warm-up run over the whole package (the cache and the index warm), one
  file is edited (a comment appended) and the hook is run on it; once on a file the prefilter
  passes (parsed and analysed), once on one it rejects (read and syntax-checked only); and,
  with `--project DIR --file REL`, on a file of another project (one whose calls into the
  project's other modules the index follows: torch's own imports are the API table's).

Prints medians, each build's ratio to ruff in the same run, and the index build's ratio to the
baseline's next to the target (at most 1.5x); timings depend on the machine: never asserted.

    python benchmarks/precommit_bench.py [--torch-root DIR] [--repeat N] [--baseline REF]
                                         [--project DIR --file REL]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from torch_tree import default_torch_root

from csan_lint.lint.shell.cache import RACY_NS
from csan_lint.lint.shell.files import might_have_findings

RATIO_TARGET = 1.5
"""The index build's time over the baseline's, cold whole package and warm pre-commit alike."""
PARSED_FILE = "distributed/fsdp/_fully_shard/_fsdp_param_group.py"
REJECTED_FILE = "nn/modules/linear.py"


@dataclass(frozen=True)
class Build:
    name: str
    environment: dict[str, str]
    project: Path


def install(source: Path, destination: Path) -> dict[str, str]:
    """`source` (a checkout) installed into `destination`; the environment that runs it."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
        + [str(destination), str(source)],
        check=True,
    )
    return {**os.environ, "PYTHONPATH": str(destination)}


def baseline_source(reference: str, destination: Path) -> Path:
    """The tree of git `reference` of this repository, unpacked into `destination`."""
    repository = Path(__file__).resolve().parent.parent
    destination.mkdir()
    archive = subprocess.run(["git", "-C", str(repository), "archive", reference], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(destination)], input=archive.stdout, check=True)
    return destination


def copy_project(source: Path, project: Path, under: str = "torch") -> None:
    """The Python files of `source` under `project/under`, files and directories aged so that
    their stats are trusted."""
    tree = project / under
    for path in sorted(source.rglob("*.py")):
        copy = tree / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    (project / "pyproject.toml").write_text('[project]\nname = "copy"\n')
    old = time.time() - 3600
    for directory, _, files in os.walk(project):
        for name in files:
            os.utime(Path(directory) / name, (old, old))
        os.utime(directory, (old, old))


def timed(command: list[str], cwd: Path, environment: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if completed.returncode not in (0, 2):
        raise SystemExit(f"{command[:4]} failed ({completed.returncode}): {completed.stderr[-2000:]}")
    return wall


def csan(build: Build, *arguments: str) -> float:
    return timed([sys.executable, "-m", "csan_lint", "--exit-zero", "-q", *arguments], build.project, build.environment)


def report(title: str, times: dict[str, list[float]], builds: list[Build]) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{title}")
    for name, value in medians.items():
        ruff_ratio = f"  {value / medians['ruff']:6.1f}x ruff" if name != "ruff" else ""
        print(f"  {name:<10} {value:7.3f} s{ruff_ratio}")
    baseline, ours = builds
    ratio = medians[ours.name] / medians[baseline.name]
    verdict = "met" if ratio <= RATIO_TARGET else "MISSED"
    print(f"  {ours.name} / {baseline.name}: {ratio:.2f}x (target <= {RATIO_TARGET}x: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind, alternating; medians printed")
    parser.add_argument("--baseline", default="main", help="git reference of the build without the index")
    parser.add_argument("--project", type=Path, help="also: the hook on --file of this project (a checkout)")
    parser.add_argument("--file", help="with --project: the file to edit, relative to it")
    parser.add_argument("--no-torch", action="store_true", help="with --project: that project alone")
    arguments = parser.parse_args()
    source = (arguments.torch_root or default_torch_root()).resolve()
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        raise SystemExit("ruff not found: `pip install ruff` to compare with it")
    parsed, rejected = (source / PARSED_FILE), (source / REJECTED_FILE)
    if not (might_have_findings(parsed.read_text()) and not might_have_findings(rejected.read_text())):
        raise SystemExit(f"{PARSED_FILE} should pass the prefilter and {REJECTED_FILE} not: pick others")
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}  torch package: {source}")
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        checkout = Path(__file__).resolve().parent.parent
        baseline = baseline_source(arguments.baseline, work / "base")
        builds = [
            Build(arguments.baseline, install(baseline, work / "b"), work / "p1"),
            Build("index", install(checkout, work / "i"), work / "p2"),
        ]
        ruff_command = [ruff, "check", "--no-cache", "--isolated", "--exit-zero", "--quiet"]
        if not (arguments.no_torch and arguments.project):
            torch(builds, source, arguments.repeat, ruff_command)
        if arguments.project is not None and arguments.file:
            others = [
                Build(build.name, build.environment, build.project.with_name(build.project.name + "x"))
                for build in builds
            ]
            for build in others:
                copy_project(arguments.project.resolve(), build.project, under=".")
            hook(others, arguments.file, arguments.repeat, ruff_command)


def torch(builds: list[Build], source: Path, repeat: int, ruff_command: list[str]) -> None:
    """The cold whole package, then the hook on a parsed and on a rejected file."""
    for build in builds:
        copy_project(source, build.project)
    cold: dict[str, list[float]] = {build.name: [] for build in builds} | {"ruff": []}
    for _ in range(repeat):
        for build in builds:
            shutil.rmtree(build.project / ".csan_lint_cache", ignore_errors=True)
            cold[build.name].append(csan(build, "."))
        cold["ruff"].append(timed([*ruff_command, "."], builds[0].project))
    report("cold, whole package (empty cache):", cold, builds)
    for relative in (PARSED_FILE, REJECTED_FILE):
        hook(builds, f"torch/{relative}", repeat, ruff_command)


def hook(builds: list[Build], relative: str, repeat: int, ruff_command: list[str]) -> None:
    """The pre-commit hook on `relative` of each build's project, edited before each run, with
    the cache and the index warm."""
    times: dict[str, list[float]] = {build.name: [] for build in builds} | {"ruff": []}
    for build in builds:
        csan(build, ".")  # warm: the cache (and the index) hold every file
    # As a hook runs long after the index was built: a directory changed within the last two
    # seconds (the cache folder made in the root) is listed again, as git does.
    time.sleep(RACY_NS / 1e9 + 0.5)
    for run in range(repeat):
        for build in builds:
            with (build.project / relative).open("a") as handle:
                handle.write(f"\n# edited {run}\n")
            times[build.name].append(csan(build, "--force-exclude", relative))
        times["ruff"].append(timed([*ruff_command, relative], builds[0].project))
    report(f"pre-commit, one edited file, warm ({relative}):", times, builds)


if __name__ == "__main__":
    main()
