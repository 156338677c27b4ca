"""`--format sarif`: the static check as a SARIF 2.1.0 log, for code-scanning services
(GitHub code scanning reads it with `github/codeql-action/upload-sarif`).

Every rule of the catalog is described in the log, not only the ones that fired: a service
then knows a rule that ran and found nothing from one that did not run. The help text is the
`--explain` text, so the catalog has one source. The finding's block (its `span`) goes in
`relatedLocations`, its suggested fix in the result's `properties`.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from csan_lint import __version__
from csan_lint.lint.model import Finding
from csan_lint.lint.output import format_explanation
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.runner import DIAGNOSTIC_NAMES, LintResult

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/csan-lint/"
SRCROOT = "%SRCROOT%"
DIAGNOSTIC_SUMMARIES = {
    "syntax-error": "the file does not parse as Python: nothing in it was checked",
    "internal-error": "csan-lint failed on the file (a bug in csan-lint): nothing in it was checked",
    "unreadable-file": "the path could not be read or decoded: nothing in it was checked",
}


def _rule_descriptor(rule: type[Rule]) -> dict[str, Any]:
    help_text = format_explanation(rule)
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.rationale() or rule.summary},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": "error"},
        "properties": {"confirmedBy": list(rule.confirmed_by), "fixTitle": rule.fix_title},
    }


def _diagnostic_descriptor(code: str, name: str) -> dict[str, Any]:
    summary = DIAGNOSTIC_SUMMARIES[name]
    return {
        "id": code,
        "name": name,
        "shortDescription": {"text": summary},
        "help": {"text": f"{code} {name}: {summary}. Not a rule: always reported, never suppressed."},
        "defaultConfiguration": {"level": "error"},
    }


def _artifact_location(path: str) -> dict[str, Any]:
    """A path as the linter shows it: relative ones hang off %SRCROOT% (the working directory)."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(PurePosixPath(path).as_posix()), "uriBaseId": SRCROOT}


def _result(finding: Finding, rule_index: int) -> dict[str, Any]:
    location = _artifact_location(finding.path)
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": "error",
        "message": {"text": finding.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": {
                        "startLine": finding.line,
                        "startColumn": finding.column,
                        "endLine": finding.end_line,
                        "endColumn": finding.end_column,
                    },
                }
            }
        ],
        "relatedLocations": [
            {
                "id": 1,
                "message": {"text": "the statements the finding is about (its span)"},
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": {"startLine": finding.span.start_line, "endLine": finding.span.end_line},
                },
            }
        ],
        "properties": {"span": {"startLine": finding.span.start_line, "endLine": finding.span.end_line}},
    }
    if finding.fix:
        result["properties"]["fix"] = finding.fix
    return result


def sarif_log(result: LintResult, cwd: Path | None = None) -> dict[str, Any]:
    """The log as a JSON-ready dict: one run, the catalog (and the non-rule diagnostics) as the
    driver's rules, one result per finding. Relative paths are relative to `cwd` (default: the
    working directory)."""
    descriptors = [_rule_descriptor(rule) for rule in all_rules()]
    descriptors += [_diagnostic_descriptor(code, name) for code, name in sorted(DIAGNOSTIC_NAMES.items())]
    index = {descriptor["id"]: position for position, descriptor in enumerate(descriptors)}
    root = (cwd or Path.cwd()).as_uri().rstrip("/") + "/"
    run = {
        "tool": {
            "driver": {
                "name": "csan-lint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": descriptors,
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": root}},
        "columnKind": "unicodeCodePoints",
        "invocations": [
            {"executionSuccessful": not result.has_tool_errors}
        ],
        "results": [_result(finding, index[finding.code]) for finding in result.findings],
        "properties": {
            "filesChecked": result.files_checked,
            "filesParsed": result.files_parsed,
            "filesWithFindings": result.files_with_findings,
        },
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def format_sarif(result: LintResult) -> str:
    return json.dumps(sarif_log(result), indent=2) + "\n"
