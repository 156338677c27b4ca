"""What users feel under `pytest --csan`: a test suite's time with checking next to the same
suite on the same device without checking (`pytest --csan-emulate` on CPU), both run as
subprocesses, as a user runs them. Two suites: the shipped examples/ tests, and a synthetic one
generated into a temporary folder (a training loop with a side stream, thousands of ops per
test, race-free so that both runs pass). Each is reported twice: end to end (start-up and
collection included, what a user waits for) and the tests' own time (pytest's per-test
durations, summed from a JUnit XML report). Targets are printed next to the ratios, never
asserted.

    python benchmarks/suite_bench.py [--tests N] [--steps N] [--repeat N] [--device D]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

from bench_table import Row, print_table, readme_row

TARGET = 1.5
"""A suite's time with checking over the same suite without."""

README_MEASURES = "`pytest --csan` against the same suite on the emulated device without checking"
README_FIGURES = (
    "examples/ {examples_wall}x end to end, {examples_tests}x the tests' own time; synthetic suite ({ops} ops a"
    " test) {synthetic_wall}x end to end, {synthetic_tests}x the tests' own time (target 1.5x)"
)
"""The README row this script prints; tests/docs checks README's row has this shape."""

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

_SYNTHETIC_TEST = '''
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

OPS_PER_STEP = 7


def train(seed, steps):
    """Linear regression by hand, with a side stream that snapshots the weights every 4th step."""
    torch.manual_seed(seed)
    weights = torch.zeros(16, 1, device="cuda")
    true_weights = torch.randn(16, 1, device="cuda")
    inputs = torch.randn(32, 16, device="cuda")
    targets = inputs @ true_weights
    side = torch.cuda.Stream()
    snapshots = []
    for step in range(steps):
        error = inputs @ weights - targets          # mm, sub
        grad = inputs.t() @ error                   # t, mm
        grad.mul_(1 / len(inputs))                  # mul_
        weights.sub_(grad, alpha=0.1)               # sub_
        error.abs_()                                # abs_
        if step % 4 == 0:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                snapshots.append(weights.clone())
            torch.cuda.current_stream().wait_stream(side)
            if len(snapshots) > 4:
                snapshots.pop(0)
    torch.cuda.synchronize()
    return weights.cpu(), true_weights.cpu()
'''

_SYNTHETIC_CASE = """

def test_converges_{index}():
    weights, true_weights = train({index}, {steps})
    assert (weights - true_weights).abs().max() < 1.0
"""


def write_synthetic_suite(folder: Path, tests: int, steps: int) -> int:
    """The synthetic suite (`tests` tests in two files) and the ops each test runs at least."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    half = (tests + 1) // 2
    for name, indices in (("test_a.py", range(half)), ("test_b.py", range(half, tests))):
        cases = "".join(_SYNTHETIC_CASE.format(index=i, steps=steps) for i in indices)
        (folder / name).write_text(_SYNTHETIC_TEST + cases)
    return 7 * steps


def _run(folder: Path, checking: bool, device: str, report: Path) -> tuple[float, float]:
    """(wall seconds, summed test seconds) of one pytest run; fails loudly if a test failed."""
    mode = "--csan" if checking else "--csan-emulate"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", mode, f"--csan-device={device}",
        f"--junitxml={report}", str(folder),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1) or " passed" not in done.stdout:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    cases = ElementTree.parse(report).getroot().iter("testcase")
    return wall, sum(float(case.get("time", 0)) for case in cases)


def bench_suite(name: str, folder: Path, device: str, repeat: int) -> Iterator[Row]:
    """Rows for one suite: end to end and the tests' own time, checked vs unchecked, medians of
    `repeat` interleaved runs."""
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="suite_bench_") as scratch:
        for i in range(repeat):
            for checking in (False, True):
                runs[checking].append(_run(folder, checking, device, Path(scratch) / f"{i}-{checking}.xml"))
    for label, index in (("end to end", 0), ("tests' own time", 1)):
        checked = statistics.median(r[index] for r in runs[True])
        plain = statistics.median(r[index] for r in runs[False])
        yield (
            f"{name}: {label} (s), --csan vs --csan-emulate",
            f"{checked:.2f}",
            f"{plain:.2f}",
            f"{checked / plain:.2f}x (target <= {TARGET:g}x)",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=8, help="tests in the synthetic suite")
    parser.add_argument("--steps", type=int, default=400, help="training steps per synthetic test")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each side")
    parser.add_argument("--device", default="emulated", choices=("auto", "cuda", "emulated"))
    args = parser.parse_args(argv)
    rows = list(bench_suite("examples/", EXAMPLES, args.device, args.repeat))
    with tempfile.TemporaryDirectory(prefix="suite_bench_") as scratch:
        folder = Path(scratch) / "synthetic"
        ops = write_synthetic_suite(folder, args.tests, args.steps)
        rows += bench_suite(f"synthetic ({args.tests} tests, >= {ops} ops each)", folder, args.device, args.repeat)
    print_table(rows, peer="unchecked")
    ratios = [row[3].split("x")[0] for row in rows]
    figures = dict(zip(("examples_wall", "examples_tests", "synthetic_wall", "synthetic_tests"), ratios, strict=True))
    figures["ops"] = str(ops)
    print(readme_row(Path(__file__).name, README_MEASURES, README_FIGURES.format(**figures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
