"""Static benchmark: csan-lint cold over the installed torch package, and next to torchfix on a
subtree both lint.

Both tools run in this process, their imports done before the clock starts, each with the
process pool it uses from its own CLI (workers = CPU count). The targets are printed next to the
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
from pathlib import Path

from csan_lint.lint.config import load_config
from csan_lint.lint.runner import lint_paths

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


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def run_csan_lint(root: Path) -> tuple[float, str]:
    """Seconds for a cold lint of `root` and a note on what was parsed and found."""
    config = load_config([str(root)])
    seconds, result = timed(lambda: lint_paths([str(root)], config))
    note = (
        f"{result.files_checked} files checked, {result.files_parsed} parsed after the prefilter, "
        f"{len(result.findings)} findings"
    )
    return seconds, note


def run_torchfix(root: Path) -> float | None:
    """Seconds for `torchfix --select ALL root`, as its CLI runs it; None if it is not installed."""
    try:
        from torchfix import __main__ as torchfix_cli
    except ImportError:
        return None

    def quietly() -> None:
        # torchfix prints a diff per fixable file on stdout, its summary on stderr, and exits 1
        # when it failed on a file: none of that matters for the timing.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with contextlib.suppress(SystemExit):
                torchfix_cli.main()

    argv = sys.argv
    sys.argv = ["torchfix", "--select", "ALL", str(root)]
    try:
        seconds, _ = timed(quietly)
    finally:
        sys.argv = argv
    return seconds


def rate(lines: int, seconds: float) -> str:
    return f"{lines / seconds:,.0f} lines/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-root", type=Path, default=None, help="the torch package directory")
    parser.add_argument("--subtree", default="distributed/fsdp", help="shared subtree, relative to the torch root")
    parser.add_argument("--skip-torchfix", action="store_true", help="only measure csan-lint")
    args = parser.parse_args()
    torch_root = (args.torch_root or default_torch_root()).resolve()
    subtree = torch_root / args.subtree
    print(f"cpus: {os.cpu_count()}  torch package: {torch_root}")

    files = python_files(torch_root)
    lines = count_lines(files)
    seconds, note = run_csan_lint(torch_root)
    verdict = "met" if seconds <= WHOLE_PACKAGE_TARGET_S else "MISSED"
    print(f"csan-lint, whole package, cold: {len(files)} files, {lines:,} lines in {seconds:.2f} s")
    print(f"  {len(files) / seconds:,.0f} files/s, {rate(lines, seconds)} ({note})")
    print(f"  target <= {WHOLE_PACKAGE_TARGET_S:.0f} s: {verdict}")

    sub_lines = count_lines(python_files(subtree))
    ours, note = run_csan_lint(subtree)
    print(f"subtree {args.subtree}: {sub_lines:,} lines")
    print(f"  csan-lint: {ours:.2f} s, {rate(sub_lines, ours)} ({note})")
    if args.skip_torchfix:
        return
    theirs = run_torchfix(subtree)
    if theirs is None:
        print("  torchfix: not installed; to compare: pip install --no-deps torchfix && pip install flake8 PyYAML")
        return
    ratio = theirs / ours
    verdict = "met" if ratio >= TORCHFIX_RATIO_TARGET else "MISSED"
    print(f"  torchfix --select ALL: {theirs:.2f} s, {rate(sub_lines, theirs)}")
    print(f"  csan-lint / torchfix lines/s: {ratio:.1f}x (target >= {TORCHFIX_RATIO_TARGET:.0f}x: {verdict})")


if __name__ == "__main__":
    main()
