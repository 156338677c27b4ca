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

from csan_lint import REPOSITORY_URL, __version__
from csan_lint.lint.diagnostics import DIAGNOSTIC_NAMES
from csan_lint.lint.model import Finding
from csan_lint.lint.registry import all_rules
from csan_lint.lint.rule import Rule
from csan_lint.lint.shell.output import NON_RULE_SUMMARIES, format_explanation, rule_url
from csan_lint.lint.shell.runner import LintResult, rule_names

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"


def _rule_descriptor(rule: type[Rule]) -> dict[str, Any]:
    help_text = format_explanation(rule)
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.rationale() or rule.summary},
        "help": {"text": help_text, "markdown": help_text},
        "helpUri": rule_url(rule),
        "defaultConfiguration": {"level": "error"},
        "properties": {"confirmedBy": list(rule.confirmed_by), "fixTitle": rule.fix_title},
    }


def _non_rule_descriptor(code: str) -> dict[str, Any]:
    name, summary = rule_names()[code], NON_RULE_SUMMARIES[code]
    always = " Not a rule: always reported, never suppressed." if code in DIAGNOSTIC_NAMES else ""
    return {
        "id": code,
        "name": name,
        "shortDescription": {"text": summary},
        "help": {"text": f"{code} {name}: {summary}.{always}"},
        "defaultConfiguration": {"level": "error"},
    }


def artifact_location(path: str) -> dict[str, Any]:
    """A path as the linter shows it: relative ones hang off %SRCROOT% (the working directory)."""
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(PurePosixPath(path).as_posix()), "uriBaseId": SRCROOT}


def finding_result(finding: Finding, rule_index: int) -> dict[str, Any]:
    """A static finding as a result: its position, its block as the related location."""
    location = artifact_location(finding.path)
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


def static_descriptors() -> list[dict[str, Any]]:
    """The catalog's rules, then the non-rule diagnostics."""
    descriptors = [_rule_descriptor(rule) for rule in all_rules()]
    return descriptors + [_non_rule_descriptor(code) for code in sorted(NON_RULE_SUMMARIES)]


def rule_indexes(descriptors: list[dict[str, Any]]) -> dict[str, int]:
    """Rule id -> its index among the driver's rules (a result's `ruleIndex`)."""
    return {descriptor["id"]: position for position, descriptor in enumerate(descriptors)}


def sarif_log(result: LintResult, cwd: Path | None = None) -> dict[str, Any]:
    """The log as a JSON-ready dict: one run, the catalog (and the non-rule diagnostics) as the
    driver's rules, one result per finding. Relative paths are relative to `cwd` (default: the
    working directory)."""
    descriptors = static_descriptors()
    index = rule_indexes(descriptors)
    return sarif_run_log(
        descriptors,
        [finding_result(finding, index[finding.code]) for finding in result.findings],
        {"executionSuccessful": not result.has_tool_errors},
        {
            "filesChecked": result.files_checked,
            "filesParsed": result.files_parsed,
            "filesWithFindings": result.files_with_findings,
        },
        cwd,
    )


def sarif_run_log(
    descriptors: list[dict[str, Any]],
    results: list[dict[str, Any]],
    invocation: dict[str, Any],
    properties: dict[str, Any],
    cwd: Path | None = None,
) -> dict[str, Any]:
    """A log of one csan-lint run (the static check's, `--confirm`'s): its rules, results, one
    invocation and the run's properties."""
    root = (cwd or Path.cwd()).as_uri().rstrip("/") + "/"
    run = {
        "tool": {
            "driver": {
                "name": "csan-lint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": REPOSITORY_URL,
                "rules": descriptors,
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": root}},
        "columnKind": "unicodeCodePoints",
        "invocations": [invocation],
        "results": results,
        "properties": properties,
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def format_sarif(result: LintResult) -> str:
    return json.dumps(sarif_log(result), indent=2) + "\n"
