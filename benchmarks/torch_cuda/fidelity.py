"""PyTorch's own CUDA tests as a fidelity suite for the emulated device.

No PyTorch test code is kept in this repository (a workplace rule forbids committing code
copied from public repositories): give the runner a copy of torch's test/test_cuda.py, from
the tag of the installed torch (for torch 2.13: test/test_cuda.py at tag v2.13.0). It runs the
TestCuda tests named in selection.txt under `pytest --csan --csan-device emulated` (`--device
cuda`: on a real GPU, as benchmarks/gpu/check.sh runs it), then prints
each test's outcome against what the selection expects, and the counts.

    python benchmarks/torch_cuda/fidelity.py PATH/TO/test_cuda.py [--selection FILE]

torch's TestCase needs numpy, expecttest and psutil. Exit status 1 when a `run` test failed
or an `expect-fail` test passed (the selection is stale), else 0.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import NamedTuple

SELECTION = Path(__file__).with_name("selection.txt")
CLASS = "TestCuda"


class Selected(NamedTuple):
    name: str
    expect_pass: bool
    reason: str


def read_selection(path: Path) -> list[Selected]:
    """The selection's tests; a malformed line is an error naming the file and line."""
    selected = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        verb, _, rest = line.partition(" ")
        if verb == "run" and rest.isidentifier():
            selected.append(Selected(rest, True, ""))
        elif verb == "expect-fail" and ":" in rest and rest.partition(":")[0].isidentifier():
            name, _, reason = rest.partition(":")
            selected.append(Selected(name, False, reason.strip()))
        else:
            raise SystemExit(f"{path}:{lineno}: expected 'run NAME' or 'expect-fail NAME: WHY', got {line!r}")
    return selected


def defined_tests(test_file: Path) -> set[str]:
    """TestCuda's method names in the given copy (read, not imported: importing needs CUDA)."""
    import ast

    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == CLASS:
            return {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
    raise SystemExit(f"{test_file}: no class {CLASS}")


def run_tests(test_file: Path, names: list[str], device: str = "emulated") -> dict[str, str]:
    """Outcome per test name ("passed", "failed", "skipped") from pytest's JUnit XML."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        node_ids = [f"{test_file.name}::{CLASS}::{name}" for name in names]
        command = [
            sys.executable,
            "-m",
            "pytest",
            "--csan",
            "--csan-device",
            device,
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={report}",
            *node_ids,
        ]
        subprocess.run(command, cwd=test_file.parent, check=False)
        outcomes = {}
        for case in ElementTree.parse(report).iter("testcase"):
            children = {child.tag for child in case}
            if children & {"failure", "error"}:
                outcome = "failed"
            elif "skipped" in children:
                outcome = "skipped"
            else:
                outcome = "passed"
            outcomes[case.get("name", "")] = outcome
        return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_file", type=Path, help="a copy of torch's test/test_cuda.py")
    parser.add_argument("--selection", type=Path, default=SELECTION)
    parser.add_argument("--device", choices=("emulated", "cuda"), default="emulated", help="cuda: on a real GPU")
    args = parser.parse_args(argv)
    test_file = args.test_file.resolve()
    selected = read_selection(args.selection)
    present = defined_tests(test_file)
    missing = [s.name for s in selected if s.name not in present]
    outcomes = run_tests(test_file, [s.name for s in selected if s.name in present], args.device)
    counts = {"passed": 0, "failed": 0, "skipped": 0, "expected failures": 0, "unexpected": 0}
    for test in selected:
        if test.name in missing:
            continue
        outcome = outcomes.get(test.name, "failed")
        if test.expect_pass:
            verdict = "ok" if outcome != "failed" else "UNEXPECTED FAILURE"
        else:
            verdict = "expected failure" if outcome == "failed" else "UNEXPECTED PASS"
        counts[outcome] += 1
        if verdict.startswith("UNEXPECTED"):
            counts["unexpected"] += 1
        elif not test.expect_pass:
            counts["expected failures"] += 1
        print(f"{outcome:8} {verdict:18} {test.name}" + (f"  ({test.reason})" if test.reason else ""))
    for name in missing:
        print(f"missing  {'':18} {name}")
    summary = ", ".join(f"{value} {key}" for key, value in counts.items())
    print(f"\n{len(selected)} selected, {len(missing)} missing from this copy: {summary}")
    return 1 if counts["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
