"""`--format sarif` is a SARIF 2.1.0 log that the official schema accepts, carrying the catalog's
rule metadata, each finding's location and its block span."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.output import NON_RULE_SUMMARIES, format_explanation
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.shell.sarif import sarif_log


def _sarif(*arguments: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["--format", "sarif", *arguments])
    return result.exit_code, json.loads(result.stdout)


def test_cli_log_is_valid_sarif(project: Path, validator: jsonschema.protocols.Validator) -> None:
    code, log = _sarif(".")
    assert code == 1
    validator.validate(log)
    assert log["version"] == "2.1.0" and len(log["runs"]) == 1
    results = log["runs"][0]["results"]
    assert sorted((r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for r in results) == [
        ("CSL001", "broken.py"),
        ("CSL101", "pkg/buggy.py"),
        ("CSL201", "pkg/buggy.py"),
    ]


def test_the_validator_rejects_a_broken_log(project: Path, validator: jsonschema.protocols.Validator) -> None:
    """The schema check is real: a region starting at line 0 and a result with no message fail."""
    _, log = _sarif(".")
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(log)
    _, log = _sarif(".")
    del log["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(log)


def test_rules_carry_the_catalog(project: Path) -> None:
    _, log = _sarif("pkg")
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "csan-lint"
    rules = driver["rules"]
    assert [rule["id"] for rule in rules] == [rule.code for rule in all_rules()] + sorted(NON_RULE_SUMMARIES)
    for rule, descriptor in zip(all_rules(), rules, strict=False):  # the non-rule codes' descriptors follow
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.summary
        assert descriptor["fullDescription"]["text"] == rule.rationale()
        assert descriptor["help"]["text"] == format_explanation(rule)
        assert descriptor["properties"] == {"confirmedBy": list(rule.confirmed_by), "fixTitle": rule.fix_title}
    for result in log["runs"][0]["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_results_carry_location_span_and_fix(project: Path) -> None:
    result = lint_paths(["pkg"], load_config(["pkg"]))
    log = sarif_log(result, cwd=project)
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.as_uri() + "/"
    assert run["invocations"] == [{"executionSuccessful": True}]
    assert len(run["results"]) == len(result.findings) == 2
    for finding, entry in zip(result.findings, run["results"], strict=True):
        location = entry["locations"][0]["physicalLocation"]
        assert location["artifactLocation"] == {"uri": "pkg/buggy.py", "uriBaseId": "%SRCROOT%"}
        assert location["region"] == {
            "startLine": finding.line,
            "startColumn": finding.column,
            "endLine": finding.end_line,
            "endColumn": finding.end_column,
        }
        (related,) = entry["relatedLocations"]
        assert related["physicalLocation"]["region"] == {"startLine": 6, "endLine": 7}
        assert entry["properties"]["span"] == {"startLine": 6, "endLine": 7}
        assert entry["message"]["text"] == finding.message
        assert entry["properties"]["fix"] == finding.fix and finding.fix


def test_outside_paths_are_file_uris_and_unchecked_files_fail_the_run(
    project: Path, tmp_path_factory: pytest.TempPathFactory, validator: jsonschema.protocols.Validator
) -> None:
    elsewhere = tmp_path_factory.mktemp("other dir") / "m%x.py"
    elsewhere.write_text((project / "pkg" / "buggy.py").read_text())
    code, log = _sarif(str(elsewhere), "missing.py")
    assert code == 2
    validator.validate(log)
    run = log["runs"][0]
    uris = {r["ruleId"]: r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]}
    assert uris["CSL101"] == {"uri": elsewhere.as_uri()} and "%25x" in uris["CSL101"]["uri"]
    assert uris["CSL003"] == {"uri": "missing.py", "uriBaseId": "%SRCROOT%"}
    assert run["invocations"] == [{"executionSuccessful": False}]


def test_clean_run_is_an_empty_valid_log(project: Path, validator: jsonschema.protocols.Validator) -> None:
    code, log = _sarif("clean.py")
    assert code == 0
    validator.validate(log)
    assert log["runs"][0]["results"] == []
