"""`--confirm` cost: the whole `csan-lint --confirm` run next to running the same tests on the
same device without the sanitizer (on CPU: the emulated device with checking off,
`pytest --csan-emulate`). Both are timed end to end as subprocesses, as a user would run them.
The target is printed next to the ratio, never asserted.

    python benchmarks/confirm_bench.py [PATHS...] [--tests PATH] [--repeat N] [--device D]

Default: the shipped examples/ and examples/tests.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.runtime.confirm import watched
from csan_lint.runtime.confirm_select import select_tests

RATIO_TARGET = 2.0
"""`--confirm` total over the same tests without the sanitizer."""


def _timed(command: Sequence[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["examples"])
    parser.add_argument("--tests", default="examples/tests")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="emulated", choices=("auto", "cuda", "emulated"))
    args = parser.parse_args()

    config = load_config(args.paths)
    findings = lint_paths(args.paths, config).findings
    spans = watched(findings, args.paths, config)
    selection = select_tests(spans, [args.tests], args.paths)
    print(
        f"{len(findings)} findings, stream code in {len(spans)} files; "
        f"{len(selection.test_files)} test files reach them:"
    )
    for path in selection.test_files:
        print(f"  {path}")
    if not selection.test_files:
        print("nothing to measure")
        return 1

    confirm = [
        sys.executable, "-m", "csan_lint", *args.paths, "--confirm", "-q",
        f"--tests={args.tests}", f"--device={args.device}",
    ]  # fmt: skip
    baseline = [
        sys.executable, "-m", "pytest", *selection.test_files, "--csan-emulate",
        f"--csan-device={args.device}", "-q", "-p", "no:cacheprovider",
    ]  # fmt: skip
    confirm_times, baseline_times = [], []
    for _ in range(args.repeat):
        seconds, code, output = _timed(baseline)
        if code not in (0, 1):
            print(f"baseline failed (exit {code}):\n{output}")
            return 1
        baseline_times.append(seconds)
        seconds, code, output = _timed(confirm)
        if code not in (0, 1):
            print(f"--confirm failed (exit {code}):\n{output}")
            return 1
        confirm_times.append(seconds)
    confirm_s, baseline_s = statistics.median(confirm_times), statistics.median(baseline_times)
    ratio = confirm_s / baseline_s
    print(f"csan-lint --confirm (lint + select + sanitized run): {confirm_s:6.2f} s  (median of {args.repeat})")
    print(f"pytest --csan-emulate, same tests, no sanitizer:     {baseline_s:6.2f} s")
    verdict = "met" if ratio <= RATIO_TARGET else "MISSED"
    print(f"ratio: {ratio:.2f}x  (target <= {RATIO_TARGET:g}x: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
