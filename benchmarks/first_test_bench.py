"""How long `csan-lint --confirm` takes on a big package before its first test starts (lint,
stream code, test selection), next to `ruff check` of the same tree in the same run. The time
of each phase line `--confirm` prints is shown too. The target is printed, never asserted.

    pip install transformers==5.24.0 torch==2.13.0   # the package is installed, never committed
    python benchmarks/first_test_bench.py [PACKAGE_DIR] [--module transformers.cache_utils] [--repeat N]

Default: the installed transformers package (found without importing it). The one test, written
to a temporary folder, imports `--module` and writes the time it starts to a file: nothing heavy
runs, so what is measured is what comes before it. The static pass runs without its cache
(`--no-cache`): a cold run, as in CI; `--warm` times a run whose static pass finds its results
(and its stream code lines) in the cache a first, untimed run left. It also prints the CPU time
(user + sys) of all the run's processes and ruff's, and the load average: on shared cores the
wall time says as much about the other jobs as about this one. Figures: docs/confirm.md, Cost.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TARGET_S = 15.0
"""Seconds to the first test on transformers' whole package (issue 25)."""
TEST = """\
import os
import time

import {module}  # noqa: F401


def test_starts():
    with open(os.environ["CSAN_FIRST_TEST_MARK"], "w") as mark:
        mark.write(repr(time.time()))
"""


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed: pip install {name} torch==2.13.0")
    return list(spec.submodule_search_locations)[0]


def _children_cpu() -> float:
    """User + system CPU seconds of the children waited for so far (their own children included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _confirm_run(package: str, tests: Path, mark: Path, warm: bool) -> tuple[float, float, list[tuple[float, str]]]:
    """Seconds until the test wrote its mark, CPU seconds of the whole run (every process of it,
    to its end), and each stderr line with the time it came."""
    command = [
        sys.executable, "-m", "csan_lint", package, "--confirm", "--device=emulated",
        f"--tests={tests}", "--exit-zero", *(() if warm else ("--no-cache",)),
    ]  # fmt: skip
    environment = {**os.environ, "CSAN_FIRST_TEST_MARK": str(mark), "CI": "1"}
    mark.unlink(missing_ok=True)
    cpu = _children_cpu()
    start = time.time()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=environment)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append((time.time() - start, line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    process.wait()
    reader.join()
    if not mark.exists():
        shown = "\n".join(text for _, text in lines[-20:])
        raise SystemExit(f"the test never started (exit {process.returncode}):\n{shown}")
    return float(mark.read_text()) - start, _children_cpu() - cpu, lines


def _ruff_seconds(package: str) -> tuple[float, float]:
    """Wall and CPU seconds of `ruff check` on the package."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run([ruff, "check", "--no-cache", "--exit-zero", "--quiet", package], capture_output=True)
    return time.perf_counter() - start, _children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", help="default: the installed transformers package")
    parser.add_argument("--module", default="transformers.cache_utils", help="what the one test imports")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--warm", action="store_true", help="with the static pass's cache, filled by a first run that is not timed"
    )
    args = parser.parse_args()
    package = args.package or _package_dir("transformers")
    files = sum(1 for _ in Path(package).rglob("*.py"))
    print(f"package: {package} ({files} Python files)")
    with tempfile.TemporaryDirectory(prefix="csan-first-test-") as folder:
        tests = Path(folder, "tests")
        tests.mkdir()
        (tests / "test_first.py").write_text(TEST.format(module=args.module))
        firsts, cpus, rufs, ruff_cpus, loads = [], [], [], [], [os.getloadavg()[0]]
        if args.warm:
            _confirm_run(package, tests, Path(folder, "mark"), warm=True)
        for _ in range(args.repeat):
            seconds, cpu, lines = _confirm_run(package, tests, Path(folder, "mark"), args.warm)
            firsts.append(seconds)
            cpus.append(cpu)
            ruff_seconds, ruff_cpu = _ruff_seconds(package)
            rufs.append(ruff_seconds)
            ruff_cpus.append(ruff_cpu)
            loads.append(os.getloadavg()[0])
    for at, text in lines:
        if not text.startswith(("tests ", "races ", "time ", "missed ")):
            print(f"  {at:6.1f} s  {text}")
    first, ruff = statistics.median(firsts), statistics.median(rufs)
    cache = "warm cache" if args.warm else "cold, --no-cache"
    print(f"csan-lint --confirm, time to the first test: {first:6.1f} s  (median of {args.repeat}; {cache})")
    print(f"ruff check, same tree:                       {ruff:6.1f} s")
    cpu, ruff_cpu = statistics.median(cpus), statistics.median(ruff_cpus)
    print(f"CPU (user + sys, all its processes): the whole --confirm run {cpu:.1f} s, ruff {ruff_cpu:.1f} s")
    print(f"load average (1 min) at the start and after each run: {', '.join(f'{load:.1f}' for load in loads)}")
    verdict = "met" if first <= TARGET_S else "MISSED"
    print(f"ratio: {first / ruff:.1f}x ruff; target <= {TARGET_S:g} s to the first test: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
