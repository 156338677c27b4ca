"""Reporters: text for people, JSON for machines (schema in docs/json-format.md), GitHub
workflow annotations, rule listings (SARIF is in `csan_lint.lint.shell.sarif`).

Pure functions from results to strings; no decisions about what is a finding live here.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

from csan_lint import REPOSITORY_URL
from csan_lint.lint.model import Finding
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.shell.fix import fixable
from csan_lint.lint.shell.runner import LintResult, rule_names
from csan_lint.lint.shell.suppress import UNUSED_NOQA_CODE
from csan_lint.runtime.kinds import RUNTIME_CODES

JSON_VERSION = 1
NON_RULE_SUMMARIES = {
    "CSL001": "the file does not parse as Python: nothing in it was checked",
    "CSL002": "csan-lint failed on the file (a bug in csan-lint): nothing in it was checked",
    "CSL003": "the path could not be read or decoded: nothing in it was checked",
    "CSL005": "the analysis of the file ran out of its CPU-time budget: nothing in it was checked",
    UNUSED_NOQA_CODE: "a `# noqa: CSL...` or `# csan-lint: ignore` comment that suppresses nothing "
    "(off unless selected: `--extend-select CSL004`)",
}
"""Codes that are not rules of the catalog; all but CSL004 are always reported, never suppressed."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary_line(result: LintResult) -> str:
    if not result.findings:
        return "All checks passed."
    findings = _plural(len(result.findings), "finding")
    return f"Found {findings} in {_plural(result.files_with_findings, 'file')}."


def statistics(findings: Sequence[Finding]) -> list[tuple[str, str, int]]:
    """(code, name, count) per code, most frequent first, then by code."""
    counts = Counter(finding.code for finding in findings)
    names = rule_names()
    rows = [(code, names.get(code, ""), count) for code, count in counts.items()]
    return sorted(rows, key=lambda row: (-row[2], row[0]))


def format_text(
    result: LintResult,
    *,
    show_statistics: bool = False,
    quiet: bool = False,
    show_fixes: bool = False,
    unsafe: bool = False,
) -> str:
    """`path:line:col: CODE message` and its `help:` line per finding (or, with
    `show_statistics`, a count per code), then the summary line unless `quiet`. `show_fixes`:
    `[*]` marks what `--fix` (with `unsafe`: `--fix --unsafe-fixes`) would fix, and a count says so."""
    lines: list[str] = []
    if show_statistics:
        rows = statistics(result.findings)
        width = max((len(str(count)) for _, _, count in rows), default=1)
        lines.extend(f"{count:>{width}}  {code}  {name}" for code, name, count in rows)
    else:
        for finding in result.findings:
            marker = " [*]" if show_fixes and fixable(finding, unsafe) else ""
            lines.append(f"{finding.path}:{finding.line}:{finding.column}: {finding.code}{marker} {finding.message}")
            if finding.fix:
                lines.append(f"    help: {finding.fix}")
    if not quiet:
        lines.append(summary_line(result))
        count = sum(fixable(finding, unsafe) for finding in result.findings)
        if show_fixes and count:
            lines.append(f"[*] {count} fixable with `--fix{' --unsafe-fixes' if unsafe else ''}`.")
    return "\n".join(lines) + "\n" if lines else ""


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    """One finding in the JSON schema (version 1)."""
    return {
        "code": finding.code,
        "name": rule_names().get(finding.code, ""),
        "message": finding.message,
        "path": finding.path,
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "end_column": finding.end_column,
        "span": {"start_line": finding.span.start_line, "end_line": finding.span.end_line},
        "fix": finding.fix,
        "assumptions": list(finding.assumptions),
        "observed": list(finding.observed),
    }


def format_json(result: LintResult) -> str:
    document = {
        "version": JSON_VERSION,
        "findings": [finding_to_dict(finding) for finding in result.findings],
        "statistics": [
            {"code": code, "name": name, "count": count} for code, name, count in statistics(result.findings)
        ],
        "summary": {
            "findings": len(result.findings),
            "files_checked": result.files_checked,
            "files_parsed": result.files_parsed,
            "files_with_findings": result.files_with_findings,
        },
    }
    return json.dumps(document, indent=2) + "\n"


def _escape_data(text: str) -> str:
    """A workflow command's message: `%`, CR and LF would end or corrupt the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A workflow command property: `:` ends the property list and `,` separates properties."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(finding: Finding) -> str:
    """`::error file=..,line=..,col=..,endLine=..,endColumn=..,title=CODE name::message`, the help
    line after the message: GitHub shows it on the line in the pull request's diff."""
    properties = {
        "file": finding.path,
        "line": finding.line,
        "col": finding.column,
        "endLine": finding.end_line,
        "endColumn": finding.end_column,
        "title": f"{finding.code} {rule_names().get(finding.code, '')}".rstrip(),
    }
    message = finding.message + (f"\nhelp: {finding.fix}" if finding.fix else "")
    rendered = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties.items())
    return f"::error {rendered}::{_escape_data(message)}"


def format_github(result: LintResult, *, quiet: bool = False) -> str:
    """One annotation per finding, then the summary line (a plain log line) unless `quiet`."""
    lines = [github_annotation(finding) for finding in result.findings]
    if not quiet:
        lines.append(summary_line(result))
    return "\n".join(lines) + "\n" if lines else ""


def format_rule_list(rules: Sequence[type[Rule]]) -> str:
    """One aligned line per rule, then per runtime code (the races the sanitizer reports on their
    own): code, name, summary."""
    rows = [(rule.code, rule.name, rule.summary) for rule in rules]
    rows += [(entry.code, entry.name, f"(runtime) {entry.summary}") for entry in RUNTIME_CODES]
    width = max(len(name) for _, name, _ in rows)
    return "".join(f"{code}  {name:<{width}}  {summary}\n" for code, name, summary in rows)


def rule_url(rule: type[Rule]) -> str:
    """The rule's section of docs/rules.md in the repository (the anchor docs.py writes)."""
    return f"{REPOSITORY_URL}/blob/main/docs/rules.md#{rule.code.lower()}-{rule.name}"


def explain_code(code: str) -> str | None:
    """What `csan-lint rule CODE` prints for any code the README lists, in any case: a rule (by
    code or name), a non-rule diagnostic (CSL001-CSL005) or a runtime-only race (CSL9xx).
    None for a code that means nothing."""
    for rule in all_rules():
        if code.upper() == rule.code or code.lower() == rule.name:
            return format_explanation(rule)
    code = code.upper()
    if code in NON_RULE_SUMMARIES:
        return f"{code} {rule_names()[code]}\n\n{NON_RULE_SUMMARIES[code][:1].upper()}{NON_RULE_SUMMARIES[code][1:]}.\n"
    for entry in RUNTIME_CODES:
        if code == entry.code or code.lower() == entry.name:
            return (
                f"{entry.code} {entry.name} (runtime-only)\n\n{entry.summary[:1].upper()}{entry.summary[1:]}.\n\n"
                f"A {entry.kind} race that the sanitizer saw while running the tests (`csan-lint --confirm`, "
                "`pytest --csan`) and that no static finding explains; the report carries both accesses' "
                "stacks. Select, ignore and suppress it (`# noqa: "
                f"{entry.code}` on the line it is reported at) like a rule.\n\n"
                f"Documentation: {REPOSITORY_URL}/blob/main/docs/confirm.md\n"
            )
    return None


def format_explanation(rule: type[Rule]) -> str:
    """What `--explain CODE` prints: the rule's docs, one flagged and one clean example."""
    parts = [f"{rule.code} {rule.name}", rule.summary]
    if rule.rationale():
        parts.append(rule.rationale())
    if rule.INVALID:
        parts.append("Example (flagged):\n\n" + textwrap.indent(rule.INVALID[0].code, "    ").rstrip())
    if rule.VALID:
        parts.append("Use instead:\n\n" + textwrap.indent(rule.VALID[0].code, "    ").rstrip())
    confirmed = ", ".join(rule.confirmed_by) if rule.confirmed_by else "nothing (static only)"
    parts.append(f"Confirmed at run time (csan-lint --confirm) by: {confirmed}")
    parts.append(f"Documentation: {rule_url(rule)}")
    return "\n\n".join(parts) + "\n"
