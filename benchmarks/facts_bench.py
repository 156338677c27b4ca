"""What recording facts from runs costs: a suite under `pytest --csan --csan-facts FILE` next to
the same suite under `pytest --csan`, both run as subprocesses, interleaved. Two suites: the
shipped examples/ tests, and a synthetic one generated into a temporary folder whose tests call
a training loop in a module of its own (test files are not recorded), one call of a helper with
tensor arguments per step, so that every step is a new call to note. Reported end to end and as
the tests' own time (pytest's durations from a JUnit XML report), with the facts file's size.
Targets are printed next to the ratios, never asserted.

    python benchmarks/facts_bench.py [--tests N] [--steps N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

from bench_table import Row, print_table

TARGET = 1.3
"""A suite's time while recording facts over the same checked suite without."""

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

_TRAINER = """
import torch


def step(weights, inputs, targets, side, snapshots, index):
    error = inputs @ weights - targets
    grad = inputs.t() @ error
    grad.mul_(1 / len(inputs))
    weights.sub_(grad, alpha=0.1)
    if index % 4 == 0:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            snapshots.append(weights.clone())
        torch.cuda.current_stream().wait_stream(side)
        del snapshots[:-4]


def train(seed, steps):
    torch.manual_seed(seed)
    weights = torch.zeros(16, 1, device="cuda")
    true_weights = torch.randn(16, 1, device="cuda")
    inputs = torch.randn(32, 16, device="cuda")
    targets = inputs @ true_weights
    side = torch.cuda.Stream()
    snapshots = []
    for index in range(steps):
        step(weights, inputs, targets, side, snapshots, index)
    torch.cuda.synchronize()
    return weights.cpu(), true_weights.cpu()
"""

_TESTS = """
import pytest
import torch
from trainer import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
"""

_CASE = """

def test_converges_{index}():
    weights, true_weights = train({index}, {steps})
    assert (weights - true_weights).abs().max() < 1.0
"""


def write_suite(folder: Path, tests: int, steps: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\npythonpath = .\naddopts = -p no:cacheprovider\n")
    (folder / "trainer.py").write_text(_TRAINER)
    (folder / "test_train.py").write_text(_TESTS + "".join(_CASE.format(index=i, steps=steps) for i in range(tests)))


def _run(folder: Path, facts: Path | None, report: Path) -> tuple[float, float]:
    """(wall seconds, summed test seconds) of one checked pytest run; fails loudly on a failure."""
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--csan", "--csan-device=emulated",
        "--csan-report-only", f"--junitxml={report}", *((f"--csan-facts={facts}",) if facts else ()), str(folder),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - start
    if done.returncode != 0 or " passed" not in done.stdout:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    cases = ElementTree.parse(report).getroot().iter("testcase")
    return wall, sum(float(case.get("time", 0)) for case in cases)


def bench_suite(name: str, folder: Path, repeat: int) -> Iterator[Row]:
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="facts_bench_") as scratch:
        facts = Path(scratch) / "facts.json"
        for i in range(repeat):
            for recording in (False, True):
                report = Path(scratch) / f"{i}-{recording}.xml"
                runs[recording].append(_run(folder, facts if recording else None, report))
        document = json.loads(facts.read_text())
        size = facts.stat().st_size
    for label, index in (("end to end", 0), ("tests' own time", 1)):
        recorded = statistics.median(r[index] for r in runs[True])
        plain = statistics.median(r[index] for r in runs[False])
        yield (
            f"{name}: {label} (s), --csan-facts vs --csan",
            f"{recorded:.2f}",
            f"{plain:.2f}",
            f"{recorded / plain:.2f}x (target <= {TARGET:g}x)",
        )
    functions = document["functions"]
    contexts = sum(len(entry["contexts"]) for entry in functions)
    yield (f"{name}: facts file", f"{size / 1024:.1f} KiB", "", f"{len(functions)} functions, {contexts} contexts")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=4, help="tests in the synthetic suite")
    parser.add_argument("--steps", type=int, default=200, help="training steps per synthetic test")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each side")
    args = parser.parse_args(argv)
    rows = list(bench_suite("examples/", EXAMPLES, args.repeat))
    with tempfile.TemporaryDirectory(prefix="facts_bench_") as scratch:
        folder = Path(scratch) / "synthetic"
        write_suite(folder, args.tests, args.steps)
        rows += bench_suite(f"synthetic ({args.tests} tests, {args.steps} calls each)", folder, args.repeat)
    print_table(rows, peer="--csan alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
