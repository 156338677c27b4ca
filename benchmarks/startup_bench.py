"""Start-up benchmark: what pre-commit pays per commit. `csan-lint --version`, a one-file lint
(a file the prefilter rejects, one it parses, the same one from a warm cache) and the modules each
imports, next to `ruff check` of the same file and `python -c pass`; then both as pre-commit hooks
on one file (`pre-commit run HOOK --files FILE`, both `language: system` hooks of one config in
one repository, so pre-commit's own start-up is on both sides), the ratio the hook target is
about.

Each command is a fresh process, run several times; the median wall and CPU times are printed,
with the ratios of the CPU times (barely moved by other load on the machine, unlike wall time) to
`python -c pass` and to ruff. Timings depend on the machine: printed, never asserted.

    python benchmarks/startup_bench.py [--repeat N]

ruff is optional (`pip install ruff`); without it, its rows are left out; so is pre-commit.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from csan_lint.lint.registry import all_rules

HOOK_RATIO_TARGET = 1.5
"""The csan-lint hook's wall time over the ruff hook's, on one file."""
VERSION_TARGET_MS = 50.0
HEAVY_MODULES = ("libcst", "concurrent.futures", "multiprocessing", "torch")
"""What a run should import only when it needs it (torch: never)."""


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median_time(command: list[str], cwd: Path, repeat: int) -> Timing:
    walls, cpus = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), _children_cpu()
        subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - start_cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def heavy_imports(arguments: list[str], cwd: Path) -> list[str]:
    """The HEAVY_MODULES a csan-lint run imports, from `python -X importtime`."""
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "csan_lint", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")
    }
    return [name for name in HEAVY_MODULES if name in imported]


def hook_times(ruff: str, repeat: int) -> tuple[Timing, Timing] | None:
    """(csan-lint hook, ruff hook) on one rejected file, through pre-commit; None without it."""
    try:
        import pre_commit  # noqa: F401  # only to know it is there: it runs as its own process
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as directory:
        repo = Path(directory)
        (repo / "plain.py").write_text("def add(x, y):\n    return x + y\n")
        hooks = {"csan-lint": f"{sys.executable} -m csan_lint check --force-exclude", "ruff": f"{ruff} check"}
        config = "repos:\n- repo: local\n  hooks:\n" + "".join(
            f"  - {{id: {name}, name: {name}, entry: {entry}, language: system, types: [python]}}\n"
            for name, entry in hooks.items()
        )
        (repo / ".pre-commit-config.yaml").write_text(config)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", "."], cwd=repo, check=True)
        command = [sys.executable, "-m", "pre_commit", "run", "--files", "plain.py"]
        ours = median_time([*command[:4], "csan-lint", *command[4:]], repo, repeat)
        theirs = median_time([*command[:4], "ruff", *command[4:]], repo, repeat)
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    repeat = parser.parse_args().repeat
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    with tempfile.TemporaryDirectory() as directory:
        cwd = Path(directory)
        (cwd / "plain.py").write_text("def add(x, y):\n    return x + y\n")
        (cwd / "stream.py").write_text(all_rules()[0].INVALID[0].code)
        csan = [sys.executable, "-m", "csan_lint"]
        baseline = median_time([sys.executable, "-c", "pass"], cwd, repeat)
        rows: list[tuple[str, Timing, list[str] | None]] = [("python -c pass", baseline, None)]
        ruff_time = None
        if ruff:
            ruff_time = median_time([ruff, "check", "--no-cache", "--isolated", "plain.py"], cwd, repeat)
            rows.append(("ruff check plain.py", ruff_time, None))
        cases = [
            ("csan-lint --version", ["--version"]),
            ("csan-lint plain.py (prefilter rejects)", ["--no-cache", "plain.py"]),
            ("csan-lint stream.py (parsed, no cache)", ["--no-cache", "stream.py"]),
        ]
        for label, arguments in cases:
            rows.append((label, median_time([*csan, *arguments], cwd, repeat), heavy_imports(arguments, cwd)))
        subprocess.run([*csan, "stream.py"], cwd=cwd, stdout=subprocess.DEVNULL, check=False)  # fill the cache
        rows.append(
            (
                "csan-lint stream.py (warm cache)",
                median_time([*csan, "stream.py"], cwd, repeat),
                heavy_imports(["stream.py"], cwd),
            )
        )
    print(f"median of {repeat} runs; CPU-time ratios to `python -c pass` and to `ruff check`")
    for label, timing, heavy in rows:
        to_ruff = f"{timing.cpu / ruff_time.cpu:5.1f}x ruff" if ruff_time else ""
        imports = "" if heavy is None else f"  heavy imports: {', '.join(heavy) or 'none'}"
        print(
            f"{label:<40} wall {timing.wall * 1000:6.1f} ms  cpu {timing.cpu * 1000:6.1f} ms"
            f"  {timing.cpu / baseline.cpu:4.1f}x python {to_ruff}{imports}"
        )
    if not ruff:
        print("ruff not found: `pip install ruff` to compare with it")
        return
    version = next(timing for label, timing, _ in rows if label == "csan-lint --version")
    verdict = "met" if version.cpu * 1000 <= VERSION_TARGET_MS else "MISSED"
    print(
        f"csan-lint --version: {version.cpu * 1000:.0f} ms CPU, {version.wall * 1000:.0f} ms wall "
        f"(target <= {VERSION_TARGET_MS:.0f} ms, judged on CPU: wall moves with the machine's load: {verdict})"
    )
    hooks = hook_times(ruff, repeat)
    if hooks is None:
        print("pre-commit not found: `pip install pre-commit` to compare the hooks")
        return
    ours, theirs = hooks
    print(
        f"pre-commit hook on one file: csan-lint {ours.wall * 1000:.0f} ms wall, {ours.cpu * 1000:.0f} ms CPU; "
        f"ruff {theirs.wall * 1000:.0f} ms wall, {theirs.cpu * 1000:.0f} ms CPU"
    )
    for measure in ("wall", "cpu"):
        ratio = getattr(ours, measure) / getattr(theirs, measure)
        verdict = "met" if ratio <= HOOK_RATIO_TARGET else "MISSED"
        print(f"  csan-lint hook / ruff hook: {ratio:.2f}x {measure} (target <= {HOOK_RATIO_TARGET}x: {verdict})")


if __name__ == "__main__":
    main()
