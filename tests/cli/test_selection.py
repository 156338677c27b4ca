"""Rule selection as ruff users write it (`extend-select`, `ALL`, an empty `select` refused),
`unused-noqa` (CSL004, off by default) and the `confirm` table checked at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from csan_lint.lint.model import Finding, Span
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.config import ConfigError, load_config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.shell.suppress import UNUSED_NOQA_CODE, unused_suppressions

NAMES = {"CSL101": "missing-wait-stream", "CSL102": "missing-join"}
FLAGGED = all_rules()[0].INVALID[0].code  # CSL101 among others


def _config(tmp_path: Path, body: str, **flags: list[str]):
    (tmp_path / "pyproject.toml").write_text("[tool.csan-lint]\n" + body)
    return load_config([str(tmp_path)], **flags)


def test_extend_select_adds_to_select_and_to_the_default(tmp_path: Path) -> None:
    config = _config(tmp_path, 'select = ["CSL101"]\nextend-select = ["CSL102"]\n')
    assert [rule.code for rule in config.rules] == ["CSL101", "CSL102"]
    config = load_config([str(tmp_path)], extend_select=["CSL004"], config_file=None)
    assert config.reports_unused_noqa(tmp_path / "m.py")
    assert len(_config(tmp_path, "").rules) == len(all_rules())


def test_all_and_prefixes_include_unused_noqa_but_the_default_does_not(tmp_path: Path) -> None:
    assert not _config(tmp_path, "").reports_unused_noqa(tmp_path / "m.py")
    for selector in ("ALL", "CSL0", "CSL004", "unused-noqa"):
        assert _config(tmp_path, f'select = ["{selector}"]\n').reports_unused_noqa(tmp_path / "m.py"), selector
    config = _config(tmp_path, 'select = ["ALL"]\n[tool.csan-lint.per-file-ignores]\n"gen/*" = ["CSL004"]\n')
    assert len(config.rules) == len(all_rules())
    assert not config.reports_unused_noqa(tmp_path / "gen" / "m.py")
    assert config.reports_unused_noqa(tmp_path / "m.py")


@pytest.mark.parametrize(
    ("body", "flags", "message"),
    [
        ("select = []\n", {}, "select: selects no rule"),
        ("", {"select": []}, "--select: selects no rule"),
        ('extend-select = ["CSL7"]\n', {}, "extend-select: unknown rule code or name `CSL7`"),
        ("", {"extend_select": ["nope"]}, "--extend-select: unknown rule code or name `nope`"),
        (
            "[tool.csan-lint.confirm]\ntimout = 3\n",
            {},
            "[tool.csan-lint.confirm]: unknown key `timout`; did you mean `timeout`?",
        ),
        ("[tool.csan-lint.confirm]\ntimeout = -1\n", {}, "timeout: expected a positive number of seconds, got -1"),
        ('[tool.csan-lint.confirm]\ndevice = "gpu"\n', {}, "device: expected one of auto, cuda, emulated, got 'gpu'"),
    ],
)
def test_mistakes_fail_at_load(tmp_path: Path, body: str, flags: dict[str, list[str]], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _config(tmp_path, body, **flags)
    assert message in str(raised.value)


def _finding(line: int, code: str = "CSL101") -> Finding:
    return Finding("m.py", line, 5, code, "msg", line, 9, Span(line, line))


def test_unused_suppressions_name_only_what_suppresses_nothing() -> None:
    source = (
        "a = 1  # noqa: CSL101, CSL102, E501\n"  # CSL101 used, CSL102 unused, E501 not ours
        "b = 2  # noqa\n"  # bare noqa: other tools read it too
        "c = 3  # csan-lint: ignore\n"  # nothing to ignore here
        "d = 4  # csan-lint: ignore[missing-join]\n"  # used, by name
        "e = 5  # noqa: CSL201\n"  # CSL201 did not run: cannot be judged
    )
    findings = [_finding(1), _finding(4, "CSL102")]
    unused = unused_suppressions(findings, source, NAMES, {"CSL101", "CSL102"}, "m.py")
    assert [(f.code, f.line, f.column, f.message) for f in unused] == [
        (UNUSED_NOQA_CODE, 1, 8, "unused `noqa` directive (unused: CSL102)"),
        (UNUSED_NOQA_CODE, 3, 8, "unused `csan-lint: ignore` directive (nothing to suppress on this line)"),
    ]


def test_unused_noqa_in_a_run_covers_files_the_prefilter_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.py").write_text("x = 1  # noqa: CSL101\n")
    (tmp_path / "flagged.py").write_text(FLAGGED)
    (tmp_path / "skipped.py").write_text("# csan-lint: skip-file\nx = 1  # noqa: CSL101\n")
    off = lint_paths(["."], load_config(["."]))
    assert UNUSED_NOQA_CODE not in {f.code for f in off.findings}
    for cache in (False, True, True):  # cold, then written and read back from the cache
        on = lint_paths(["."], load_config(["."], extend_select=["CSL004"]), cache=cache)
        unused = [(f.path, f.line) for f in on.findings if f.code == UNUSED_NOQA_CODE]
        assert unused == [("plain.py", 1)]
        assert {f.path for f in on.findings} == {"plain.py", "flagged.py"}
