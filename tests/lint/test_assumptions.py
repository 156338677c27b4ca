"""The assumptions' table (lint/analysis/assumptions.py): each switch changes what the analysis
finds, as its example says; a finding names what it rests on; a mistyped name is a located error."""

from __future__ import annotations

from pathlib import Path

import pytest

from csan_lint.lint.analysis.assumptions import ASSUMPTIONS, BY_NAME, DEFAULT_ASSUMPTIONS, Assumption, Assumptions
from csan_lint.lint.engine import lint_source
from csan_lint.lint.shell.cache import settings_key
from csan_lint.lint.shell.config import ConfigError, load_config


def _found(entry: Assumption, on: bool) -> tuple[tuple[str, int], ...]:
    findings = lint_source(entry.example, "example.py", assumptions=Assumptions.from_switches([(entry.name, on)]))
    return tuple(sorted({(finding.code, finding.line) for finding in findings}))


@pytest.mark.parametrize("entry", ASSUMPTIONS, ids=lambda entry: entry.name)
def test_each_switch_changes_its_example_as_documented(entry: Assumption) -> None:
    assert _found(entry, True) == entry.when_on
    assert _found(entry, False) == entry.when_off
    assert entry.when_on != entry.when_off


@pytest.mark.parametrize("entry", ASSUMPTIONS, ids=lambda entry: entry.name)
def test_the_default_is_the_documented_one(entry: Assumption) -> None:
    default = tuple(sorted({(f.code, f.line) for f in lint_source(entry.example, "example.py")}))
    assert default == (entry.when_on if entry.default else entry.when_off)


@pytest.mark.parametrize("entry", [e for e in ASSUMPTIONS if e.when_on], ids=lambda entry: entry.name)
def test_a_finding_names_the_assumption_it_rests_on(entry: Assumption) -> None:
    switched = Assumptions.from_switches([(entry.name, True)])
    findings = lint_source(entry.example, "example.py", assumptions=switched)
    assert findings and all(entry.name in finding.assumptions for finding in findings)
    assert all(finding.code in entry.rules for finding in findings)


def test_a_finding_the_code_shows_rests_on_nothing() -> None:
    source = (
        "import torch\n\ndef f(s):\n    x = torch.ones(4, device='cuda')\n"
        "    with torch.cuda.stream(s):\n        y = x * 2\n    return y\n"
    )
    findings = [f for f in lint_source(source, "m.py") if f.code == "CSL101"]
    assert findings and findings[0].assumptions == ()


def test_config_table_and_command_line_switch_assumptions(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.csan-lint.assumptions]\nattributes-written-by-caller = true\n"
        "rebound-data-releases-callers-memory = false\n"
    )
    config = load_config([str(tmp_path)])
    assert config.assumptions.holds("attributes-written-by-caller")
    assert not config.assumptions.holds("rebound-data-releases-callers-memory")
    flipped = load_config(
        [str(tmp_path)], assume=["rebound-data-releases-callers-memory=on", "attributes-written-by-caller=off"]
    )
    assert flipped.assumptions.holds("rebound-data-releases-callers-memory")
    assert not flipped.assumptions.holds("attributes-written-by-caller")
    assert settings_key(config) != settings_key(flipped) != settings_key(load_config([str(tmp_path)], assume=[]))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("attributes-writen-by-caller = true", "unknown assumption `attributes-writen-by-caller`; did you mean"),
        ("attributes-written-by-caller = 1", "attributes-written-by-caller: expected true or false"),
    ],
)
def test_a_bad_assumptions_table_is_a_located_error(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.csan-lint.assumptions]\n{table}\n")
    with pytest.raises(ConfigError, match="pyproject.toml") as error:
        load_config([str(tmp_path)])
    assert message in str(error.value)


@pytest.mark.parametrize("switch", ["attributes-written-by-caller", "attributes-written-by-caller=maybe", "x=on"])
def test_a_bad_switch_is_refused(switch: str) -> None:
    with pytest.raises(ConfigError, match="--assume"):
        load_config(["."], assume=[switch])


def test_names_are_unique_and_defaults_hold() -> None:
    assert len(BY_NAME) == len(ASSUMPTIONS)
    assert all(DEFAULT_ASSUMPTIONS.holds(entry.name) == entry.default for entry in ASSUMPTIONS)
