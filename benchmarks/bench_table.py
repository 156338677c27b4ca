"""How the runtime benchmarks print their results: an aligned table of (measure, ours, peer,
ratio) rows, and the README row the run stands for. Each script declares README_MEASURES and
a README_FIGURES template; tests/docs/test_readme_benchmarks.py checks README's row for the
script has that shape (not the numbers, which change per run)."""

from __future__ import annotations

from collections.abc import Sequence

Row = tuple[str, str, str, str]
"""(measure, csan-lint's figure, the peer's figure from the same run, ratio or note)."""


def print_table(rows: Sequence[Row], peer: str) -> None:
    header: Row = ("measure", "csan-lint", peer, "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for i, row in enumerate([header, *rows]):
        cells = zip(row, widths, strict=True)
        print("  ".join(cell.ljust(w) if j == 0 else cell.rjust(w) for j, (cell, w) in enumerate(cells)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def readme_row(script: str, measures: str, figures: str) -> str:
    """The README benchmark table's row for `script`, as printed at the end of its run."""
    return f"README row: | `{script}` | {measures} | {figures} |"
