"""README's benchmark rows are the ones the scripts print: a script that declares
README_MEASURES and a README_FIGURES template (benchmarks/bench_table.py) has its row in README's
table with those words and that template's figures, whatever the numbers of the last run."""

from __future__ import annotations

import ast
import re
import string
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"[-+]?[\d.,]+"


def _declared(script: Path) -> dict[str, str]:
    """The script's README_* string constants, read without running it (it imports torch)."""
    found = {}
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("README_MEASURES", "README_FIGURES"):
                found[name] = ast.literal_eval(node.value)
    return found


def figures_pattern(template: str) -> re.Pattern[str]:
    """A template's text with each {field} standing for a number."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(NUMBER)
    return re.compile("".join(parts))


def _readme_rows() -> dict[str, tuple[str, str]]:
    """README's benchmark table: script name -> (measures, figures)."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        match = re.fullmatch(r"\| `([\w.]+\.py)` \| (.*) \| (.*) \|", line)
        if match:
            rows[match[1]] = (match[2], match[3])
    return rows


SCRIPTS = sorted(path for path in BENCHMARKS.glob("*.py") if _declared(path))


def test_the_runtime_scripts_declare_their_readme_row() -> None:
    names = {path.name for path in SCRIPTS}
    assert {"runtime_bench.py", "dispatch_bench.py", "suite_bench.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_readme_row_has_the_shape_the_script_prints(script: Path) -> None:
    declared = _declared(script)
    rows = _readme_rows()
    assert script.name in rows, f"README's benchmark table has no row for {script.name}"
    measures, figures = rows[script.name]
    assert measures == declared["README_MEASURES"]
    pattern = figures_pattern(declared["README_FIGURES"])
    assert pattern.fullmatch(figures), (
        f"README's figures for {script.name} are not the script's: {figures!r} against {declared['README_FIGURES']!r}"
    )


def test_printed_rows_are_readme_rows() -> None:
    """What `readme_row` prints, minus its label, is a line the README parser reads back."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_table import readme_row
    finally:
        sys.path.remove(str(BENCHMARKS))
    template = "{a}x here, {b} µs there"
    line = readme_row("some_bench.py", "what it measures", template.format(a=1.5, b="2,000"))
    match = re.fullmatch(r"README row: \| `([\w.]+\.py)` \| (.*) \| (.*) \|", line)
    assert match and match[1] == "some_bench.py" and match[2] == "what it measures"
    assert figures_pattern(template).fullmatch(match[3])
    assert not figures_pattern(template).fullmatch("1.5x here, fast there")
