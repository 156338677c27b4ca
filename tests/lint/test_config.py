"""`[tool.csan-lint]`: discovery, rule selection, per-file ignores, validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from csan_lint.lint.model import Spellings
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.config import ConfigError, find_config_file, load_config


def codes(rules) -> set[str]:
    return {rule.code for rule in rules}


ALL_CODES = {rule.code for rule in all_rules()}


def write_pyproject(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pyproject.toml"
    path.write_text(body)
    return path


def test_defaults_without_a_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(["."])
    assert config.source is None
    assert config.root == tmp_path
    assert codes(config.rules) == ALL_CODES
    assert config.respect_gitignore and config.exclude == () and dict(config.confirm) == {}


def test_found_by_walking_up_past_pyprojects_without_the_table(tmp_path: Path) -> None:
    outer = write_pyproject(tmp_path, '[tool.csan-lint]\nselect = ["CSL1"]\n')
    write_pyproject(tmp_path / "pkg", '[project]\nname = "pkg"\n')
    (tmp_path / "pkg" / "src").mkdir()
    assert find_config_file([str(tmp_path / "pkg" / "src"), str(tmp_path / "pkg")]) == outer
    config = load_config([str(tmp_path / "pkg" / "src")])
    assert config.root == tmp_path
    assert codes(config.rules) == {code for code in ALL_CODES if code.startswith("CSL1")}


def test_select_and_ignore_by_prefix_code_and_name(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[tool.csan-lint]\nselect = ["CSL1", "CSL201"]\nignore = ["missing-join"]\n')
    config = load_config([str(tmp_path)])
    expected = {code for code in ALL_CODES if code.startswith("CSL1") or code == "CSL201"} - {"CSL102"}
    assert codes(config.rules) == expected


def test_command_line_select_replaces_and_ignore_adds(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[tool.csan-lint]\nselect = ["CSL201"]\nignore = ["CSL103"]\n')
    config = load_config([str(tmp_path)], select=["CSL1"], ignore=["CSL101"])
    assert codes(config.rules) == {code for code in ALL_CODES if code.startswith("CSL1")} - {"CSL101", "CSL103"}


def test_per_file_ignores_apply_to_matching_paths_only(tmp_path: Path) -> None:
    write_pyproject(
        tmp_path,
        '[tool.csan-lint.per-file-ignores]\n"tests/*" = ["CSL201"]\n"legacy.py" = ["CSL1"]\n',
    )
    config = load_config([str(tmp_path)])
    assert codes(config.rules_for(tmp_path / "tests" / "deep" / "test_x.py")) == ALL_CODES - {"CSL201"}
    assert codes(config.rules_for(tmp_path / "src" / "legacy.py")) == {
        code for code in ALL_CODES if not code.startswith("CSL1")
    }
    assert codes(config.rules_for(tmp_path / "src" / "model.py")) == ALL_CODES


def test_confirm_table_is_passed_through(tmp_path: Path) -> None:
    write_pyproject(tmp_path, '[tool.csan-lint.confirm]\ntests = ["tests/gpu"]\ntimeout = 30\n')
    assert dict(load_config([str(tmp_path)]).confirm) == {"tests": ["tests/gpu"], "timeout": 30}


def test_project_wrappers_of_the_stream_api(tmp_path: Path) -> None:
    write_pyproject(
        tmp_path,
        '[tool.csan-lint]\nstream-contexts = ["pkg.cuda.on_stream", "self._on_stream"]\n'
        'current-stream = ["pkg.cuda.active"]\nstream-factories = ["pkg.cuda.new_stream"]\n'
        'event-factories = ["pkg.cuda.new_event"]\n',
    )
    spellings = load_config([str(tmp_path)]).spellings
    assert spellings == Spellings(
        stream_contexts=("pkg.cuda.on_stream", "self._on_stream"),
        current_stream=("pkg.cuda.active",),
        stream_factories=("pkg.cuda.new_stream",),
        event_factories=("pkg.cuda.new_event",),
    )
    assert spellings.leaves() == {"on_stream", "_on_stream", "active", "new_stream", "new_event"}


def test_explicit_config_file_that_is_not_a_pyproject(tmp_path: Path) -> None:
    other = tmp_path / "lint.toml"
    other.write_text('ignore = ["CSL101"]\nexclude = ["gen/"]\n')
    config = load_config(["."], config_file=str(other))
    assert config.source == other and config.exclude == ("gen/",)
    assert codes(config.rules) == ALL_CODES - {"CSL101"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[tool.csan-lint]\nselct = ["CSL1"]\n', "unknown key `selct`; did you mean `select`?"),
        (
            '[tool.csan-lint]\nselect = ["CSL20l"]\n',
            "select: unknown rule code or name `CSL20l`; did you mean `CSL201`?",
        ),
        ('[tool.csan-lint]\nignore = ["missing-wait-streams"]\n', "did you mean `missing-wait-stream`?"),
        ('[tool.csan-lint]\nselect = "CSL1"\n', "select: expected a list of strings, got 'CSL1'"),
        (
            '[tool.csan-lint.per-file-ignores]\n"tests/*" = ["CSL999"]\n',
            "per-file-ignores: 'tests/*': unknown rule code",
        ),
        ('[tool.csan-lint]\nrespect-gitignore = "no"\n', "respect-gitignore: expected true or false"),
        ("[tool.csan-lint\n", "invalid TOML"),
        (
            '[tool.csan-lint]\nstream-context = ["a.b"]\n',
            "unknown key `stream-context`; did you mean `stream-contexts`?",
        ),
        ('[tool.csan-lint]\ncurrent-stream = "a.b"\n', "current-stream: expected a list of strings, got 'a.b'"),
        (
            '[tool.csan-lint]\nstream-factories = ["pkg.new_stream()"]\n',
            "stream-factories: `pkg.new_stream()` is not a dotted name like `pkg.module.function`; "
            "did you mean `pkg.new_stream`?",
        ),
        ('[tool.csan-lint]\nevent-factories = ["pkg/events.make"]\n', "`pkg/events.make` is not a dotted name"),
    ],
)
def test_mistakes_name_the_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_pyproject(tmp_path, body)
    with pytest.raises(ConfigError) as error:
        load_config(["."])
    assert str(error.value).startswith("pyproject.toml")
    assert message in str(error.value)


def test_unknown_command_line_code_names_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^--ignore: unknown rule code or name `CSL2O1`; did you mean `CSL201`\?"):
        load_config(["."], ignore=["CSL2O1"])


def test_missing_explicit_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="nope.toml: config file not found"):
        load_config(["."], config_file="nope.toml")
