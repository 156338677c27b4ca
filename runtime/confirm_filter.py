"""Which races `--confirm` shows: a runtime-only race's code (CSL9xx) is selected, ignored,
per-file-ignored and `# noqa`-suppressed like a rule's; `--baseline FILE` (an earlier
`--confirm --format json` report) hides the races it already had.

A race is known to a baseline by its **site key**, which survives lines inserted above it: the
code, then for each side of the race (the racing access, the earlier one; a confirmed finding
has its own line only) the file relative to the project root, the function, and the source line
with its whitespace collapsed. Not the line number: editing above a race keeps it old; editing
the racing line itself (or moving it to another function) makes it new.
"""

from __future__ import annotations

import ast
import json
import linecache
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import display_path
from csan_lint.lint.shell.suppress import ALL, suppressions
from csan_lint.runtime.confirm_verdict import CONFIRMED, RuntimeOnly, Verdict, real
from csan_lint.runtime.kinds import RUNTIME_CODES

NAMES = {entry.code: entry.name for entry in RUNTIME_CODES}


class BaselineError(Exception):
    """A `--baseline` file that is not an earlier `--confirm --format json` report: exit 2."""


@dataclass(frozen=True)
class Hidden:
    """How many races were left out, and why."""

    ignored: int = 0
    """Runtime-only races whose code is not selected for their file."""
    suppressed: int = 0
    """Runtime-only races with a `# noqa` for their code on their line."""
    known: int = 0
    """Races (runtime-only, or confirming a finding) already in the baseline."""

    @property
    def total(self) -> int:
        return self.ignored + self.suppressed + self.known


def _code_line(path: str, line: int) -> str:
    linecache.checkcache(path)  # the file as it is now, not as first read
    return " ".join(linecache.getline(path, line).split())


@cache
def _functions(path: str, _mtime: int) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of every function of the file (as of `_mtime`)."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(found)


def _function_at(path: str, line: int) -> str:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return "<module>"
    holding = [(start, name) for start, end, name in _functions(path, mtime) if start <= line <= end]
    return max(holding)[1] if holding else "<module>"


def _side(root: Path, path: str, line: int, function: str | None = None) -> str:
    relative = os.path.relpath(real(path), real(str(root))).replace(os.sep, "/")
    return f"{relative}|{function or _function_at(path, line)}|{_code_line(path, line)}"


def race_site_key(entry: RuntimeOnly, root: Path) -> str:
    """The key of a runtime-only race: its code and both accesses' innermost frames."""
    sides = []
    for side in ("current", "previous"):
        stack = (entry.report.get(side) or {}).get("stack") or ()
        if stack:
            frame = stack[-1]
            sides.append(_side(root, str(frame["file"]), int(frame["line"]), str(frame.get("function") or "")))
    if not sides:  # no access stack: where it is reported
        sides.append(_side(root, entry.path, entry.line))
    return "|".join([entry.code, *sides])


def finding_site_key(verdict: Verdict, root: Path) -> str:
    """The key of a confirmed finding: its code and its own line's function and text."""
    finding = verdict.finding
    return f"{finding.code}|{_side(root, finding.path, finding.line)}"


def with_site_keys(
    verdicts: Sequence[Verdict], runtime_only: Sequence[RuntimeOnly], root: Path
) -> tuple[list[Verdict], list[RuntimeOnly]]:
    """The races with their site keys (what `--format json` writes for a later `--baseline`)."""
    return (
        [replace(v, site=finding_site_key(v, root)) if v.verdict == CONFIRMED else v for v in verdicts],
        [replace(entry, site=race_site_key(entry, root)) for entry in runtime_only],
    )


def suppressed_at(path: str, line: int, code: str) -> bool:
    """A `# noqa` (bare, or naming the code or its name) on the line a race is reported at."""
    codes = _suppressions(real(path)).get(line, set())
    return ALL in codes or code in codes or NAMES.get(code) in codes


@cache
def _suppressions(path: str) -> dict[int, set[str]]:
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return suppressions(source) if "noqa" in source or "csan-lint" in source else {}


def load_baseline(path: str) -> frozenset[str]:
    """The site keys of an earlier report's races."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise BaselineError(f"--baseline {path}: cannot read: {error.strerror}") from None
    except ValueError as error:
        raise BaselineError(f"--baseline {path}: not JSON ({error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("runtime_only"), list):
        raise BaselineError(f"--baseline {path}: not a `csan-lint --confirm --format json` report")
    entries: list[Any] = [*document["runtime_only"], *document.get("findings", [])]
    races = [e for e in entries if isinstance(e, dict) and ("kind" in e or e.get("verdict") == CONFIRMED)]
    keys = [entry.get("site_key") for entry in races]
    if any(not isinstance(key, str) for key in keys):
        raise BaselineError(
            f"--baseline {path}: a race has no `site_key` (a report of an older csan-lint): "
            "write it again with `csan-lint --confirm --format json`"
        )
    return frozenset(str(key) for key in keys)


def shown(
    verdicts: Sequence[Verdict],
    runtime_only: Sequence[RuntimeOnly],
    config: Config,
    baseline: frozenset[str] | None,
) -> tuple[list[Verdict], list[RuntimeOnly], Hidden]:
    """What is left to show, with site keys: runtime-only races whose code is on for their file
    and not suppressed there, then (with a baseline) the races it did not have."""
    verdicts, runtime_only = with_site_keys(verdicts, runtime_only, config.root)
    selected = [entry for entry in runtime_only if config.reports(entry.code, Path(real(entry.path)))]
    kept = [entry for entry in selected if not suppressed_at(entry.path, entry.line, entry.code)]
    hidden = Hidden(ignored=len(runtime_only) - len(selected), suppressed=len(selected) - len(kept))
    if baseline is None:
        return verdicts, kept, hidden
    new_verdicts = [v for v in verdicts if v.site is None or v.site not in baseline]
    new_races = [entry for entry in kept if entry.site not in baseline]
    known = len(verdicts) - len(new_verdicts) + len(kept) - len(new_races)
    return new_verdicts, new_races, replace(hidden, known=known)


def hidden_line(hidden: Hidden, baseline: str | None) -> list[str]:
    """A note saying how many races are not shown, and why."""
    if not hidden.total:
        return []
    parts = [
        f"{hidden.ignored} ignored by their code" * bool(hidden.ignored),
        f"{hidden.suppressed} by a noqa comment" * bool(hidden.suppressed),
        f"{hidden.known} known to {display_path(Path(baseline)) if baseline else 'the baseline'}" * bool(hidden.known),
    ]
    return [f"note: {hidden.total} race(s) not shown: {', '.join(part for part in parts if part)}"]


def summary_of(hidden: Hidden) -> Mapping[str, int]:
    return {"ignored": hidden.ignored, "suppressed": hidden.suppressed, "baseline": hidden.known}
