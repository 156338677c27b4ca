"""`--confirm --tests A B`: several test paths after one `--tests`, the way users type them; the
paths to lint are still told apart, and an ambiguous one is an error, never linted silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell import cli
from csan_lint.lint.shell.cli import main
from csan_lint.lint.shell.tests_option import expand_tests


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (
            ["--tests", "tests/a_test.py", "tests/b.py", "src/"],
            ["--tests", "tests/a_test.py", "--tests", "tests/b.py", "src/"],
        ),
        (
            ["--tests=t/test_a.py", "t/test_b.py::test_x[1]"],
            ["--tests=t/test_a.py", "--tests", "t/test_b.py::test_x[1]"],
        ),
        (
            ["src", "--tests", "unit_tests", "testing/x.py", "-k", "fast"],
            ["src", "--tests", "unit_tests", "--tests", "testing/x.py", "-k", "fast"],
        ),
        (["--tests", "tests", "app"], ["--tests", "tests", "app"]),
        (["--", "--tests", "tests/a.py", "tests/b.py"], ["--", "--tests", "tests/a.py", "tests/b.py"]),
    ],
)
def test_arguments_that_name_tests_after_tests_are_test_paths(typed, meant):
    assert expand_tests(typed) == meant


def test_the_option_reaches_confirm_with_every_path_and_the_paths_to_lint_stay(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "a.py").write_text("x = 1\n")
    seen = {}

    def confirm(staged, paths, config, options, warm):
        seen.update(paths=paths, tests=options["tests"])
        return 0

    monkeypatch.setattr(cli, "_confirm", confirm)
    done = CliRunner().invoke(main, ["--confirm", "--tests", "tests/test_a.py", "tests/test_b.py", "app"])
    assert done.exit_code == 0, done.output
    assert seen == {"paths": ["app"], "tests": ("tests/test_a.py", "tests/test_b.py")}


def test_a_file_next_to_a_test_path_that_does_not_name_tests_is_an_error(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec").mkdir()
    for name in ("a_spec.py", "b_spec.py"):
        (tmp_path / "spec" / name).write_text("x = 1\n")
    done = CliRunner().invoke(main, ["--confirm", "--tests", "spec/a_spec.py", "spec/b_spec.py"])
    assert done.exit_code == 2
    assert "`spec/b_spec.py` follows --tests spec/a_spec.py but does not look like a test path" in done.stderr
    assert "--tests spec/a_spec.py --tests spec/b_spec.py" in done.stderr
