"""Static benchmark: csan-lint cold over the installed torch package, and next to torchfix on a
subtree both lint.

Both tools run in this process, their imports done before the clock starts, each with the
process pool it uses from its own CLI (workers = CPU count). csan-lint runs cold: `lint_paths`
with its per-file results cache off (its default), as `csan-lint --no-cache` does. The targets are printed next to the
measurements, not asserted: timings depend on the machine.

    python benchmarks/static_bench.py [--torch-root DIR] [--subtree REL] [--skip-torchfix]

torchfix is optional; without it, only csan-lint's numbers are printed. It pins an old libcst
but runs with ours, so install it without its dependencies:
    pip install --no-deps torchfix && pip install flake8 PyYAML
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from csan_lint.lint.config import load_config
from csan_lint.lint.runner import lint_paths

T = TypeVar("T")

WHOLE_PACKAGE_TARGET_S = 15.0
"""Cold lint of the whole torch package (about 1.2 M lines) on 2 cores."""
TORCHFIX_RATIO_TARGET = 50.0
"""csan-lint's lines/s over torchfix's, on the same subtree."""


def default_torch_root() -> Path:
    """The installed torch package, found without importing it (importing torch takes seconds)."""
    for entry in sys.path:
        candidate = Path(entry or ".") / "torch"
        if (candidate / "__init__.py").is_file():
            return candidate.resolve()
    raise SystemExit("torch is not installed here: pass --torch-root DIR")


def python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if path.is_file())


def count_lines(files: list[Path]) -> int:
    return sum(path.read_bytes().count(b"\n") for path in files)


@dataclass(frozen=True)
class Timing:
    wall: float
    cpu: float
    """CPU seconds of this process and its finished children (worker pools): unlike wall time,
    barely moved by other load on the machine."""

    def __str__(self) -> str:
        return f"{self.wall:.2f} s wall, {self.cpu:.2f} s CPU"


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def timed(action: Callable[[], T]) -> tuple[Timing, T]:
    wall, cpu = time.perf_counter(), _cpu_seconds()
    result = action()
    return Timing(time.perf_counter() - wall, _cpu_seconds() - cpu), result


def run_csan_lint(root: Path) -> tuple[Timing, str]:
    """Time of a cold lint of `root` and a note on what was parsed and found."""
    config = load_config([str(root)])
    timing, result = timed(lambda: lint_paths([str(root)], config))
    note = (
        f"{result.files_checked} files checked, {result.files_parsed} parsed after the prefilter, "
        f"{len(result.findings)} findings"
    )
    return timing, note


def run_torchfix(root: Path) -> Timing | None:
    """Time of `torchfix --select ALL root`, as its CLI runs it; None if it is not installed."""
    try:
        from torchfix import __main__ as torchfix_cli  # type: ignore[import-untyped]
    except ImportError:
        return None

    def quietly() -> None:
        # torchfix prints a diff per fixable file on stdout, its summary on stderr, and exits 1
        # when it failed on a file: none of that matters for the timing.
        quiet_out, quiet_err = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
        with quiet_out, quiet_err, contextlib.suppress(SystemExit):
            torchfix_cli.main()

    argv = sys.argv
    sys.argv = ["torchfix", "--select", "ALL", str(root)]
    try:
        timing, _ = timed(quietly)
    finally:
        sys.argv = argv
    return timing


def rate(lines: int, timing: Timing) -> str:
    return f"{lines / timing.wall:,.0f} lines/s wall, {lines / timing.cpu:,.0f} lines/CPU-s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", type=Path, default=None, help="the torch package directory")
    parser.add_argument("--subtree", default="distributed/fsdp", help="shared subtree, relative to the torch root")
    parser.add_argument("--skip-torchfix", action="store_true", help="only measure csan-lint")
    args = parser.parse_args()
    torch_root = (args.torch_root or default_torch_root()).resolve()
    subtree = torch_root / args.subtree
    print(f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}  torch package: {torch_root}")

    files = python_files(torch_root)
    lines = count_lines(files)
    timing, note = run_csan_lint(torch_root)
    verdict = "met" if timing.wall <= WHOLE_PACKAGE_TARGET_S else "MISSED"
    print(f"csan-lint, whole package, cold: {len(files)} files, {lines:,} lines in {timing}")
    print(f"  {len(files) / timing.wall:,.0f} files/s, {rate(lines, timing)}")
    print(f"  ({note})")
    print(f"  target <= {WHOLE_PACKAGE_TARGET_S:.0f} s wall: {verdict}")

    sub_lines = count_lines(python_files(subtree))
    ours, note = run_csan_lint(subtree)
    print(f"subtree {args.subtree}: {sub_lines:,} lines")
    print(f"  csan-lint: {ours}, {rate(sub_lines, ours)} ({note})")
    if args.skip_torchfix:
        return
    theirs = run_torchfix(subtree)
    if theirs is None:
        print("  torchfix: not installed; to compare: pip install --no-deps torchfix && pip install flake8 PyYAML")
        return
    print(f"  torchfix --select ALL: {theirs}, {rate(sub_lines, theirs)}")
    for measure in ("wall", "cpu"):
        ratio = getattr(theirs, measure) / getattr(ours, measure)
        verdict = "met" if ratio >= TORCHFIX_RATIO_TARGET else "MISSED"
        target = f"target >= {TORCHFIX_RATIO_TARGET:.0f}x: {verdict}"
        print(f"  csan-lint / torchfix lines/s ({measure}): {ratio:.1f}x ({target})")


if __name__ == "__main__":
    main()
