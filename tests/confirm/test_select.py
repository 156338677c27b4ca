"""Test selection: which test files reach a flagged module through imports, and test paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from csan_lint.lint.model import Span, Spellings
from csan_lint.lint.recognize import stream_code_lines
from csan_lint.lint.registry import all_rules
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.runtime import confirm_select
from csan_lint.runtime.confirm import watched
from csan_lint.runtime.confirm_select import (
    LaterAnalyses,
    SelectionError,
    default_test_paths,
    select_tests,
    stream_code,
)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/flagged.py": "import torch\n",
            "pkg/middle.py": "from . import flagged\n",
            "pkg/other.py": "import os\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/deep.py": "from ..middle import x\n",
            "tests/test_direct.py": "from pkg.flagged import thing\n",
            "tests/test_transitive.py": "import pkg.middle\n",
            "tests/test_relative_chain.py": "from pkg.sub import deep\n",
            "tests/test_other.py": "import pkg.other\n",
            "tests/test_bare.py": "import flagged\n",
            "tests/fixtures/conftest.py": "from pkg import flagged\n",
            "tests/fixtures/test_uses_fixture.py": "def test_x(thing): pass\n",
            "tests/helpers.py": "import pkg.flagged\n",
            "tests/test_broken_syntax.py": "def (:\n",
        },
    )
    return tmp_path


def test_selects_direct_transitive_relative_and_conftest_importers(project):
    flagged = os.path.realpath("pkg/flagged.py")
    selection = select_tests([flagged], ["tests"], ["pkg"])
    assert selection.test_files == (
        "tests/fixtures/test_uses_fixture.py",
        "tests/test_bare.py",
        "tests/test_direct.py",
        "tests/test_relative_chain.py",
        "tests/test_transitive.py",
    )
    assert len(selection.reaching[flagged]) == 5


def test_unflagged_module_selects_nothing(project):
    selection = select_tests([], ["tests"], ["pkg"])
    assert selection.test_files == ()


def test_each_flagged_file_knows_its_importers(project):
    other = os.path.realpath("pkg/other.py")
    selection = select_tests([other], ["tests"], ["pkg"])
    assert selection.test_files == ("tests/test_other.py",)
    assert selection.reaching[other] == {os.path.realpath("tests/test_other.py")}


def test_explicit_node_ids_are_kept_for_pytest(project):
    flagged = os.path.realpath("pkg/flagged.py")
    asked = ["tests/test_direct.py::test_b", "tests/test_direct.py::test_a", "tests/test_other.py"]
    selection = select_tests([flagged], asked, ["pkg"])
    assert selection.test_files == ("tests/test_direct.py::test_a", "tests/test_direct.py::test_b")


def test_a_whole_file_covers_its_node_ids(project):
    flagged = os.path.realpath("pkg/flagged.py")
    asked = ["tests/test_direct.py::test_a", "tests/test_direct.py", "tests/test_bare.py::test_c"]
    selection = select_tests([flagged], asked, ["pkg"])
    assert selection.test_files == ("tests/test_bare.py::test_c", "tests/test_direct.py")


def test_missing_test_path_is_a_usage_error(project):
    with pytest.raises(SelectionError, match="test path nowhere does not exist"):
        select_tests([], ["nowhere"], ["pkg"])


def test_default_test_paths_follow_pytest_testpaths(tmp_path, monkeypatch):
    write(tmp_path, {"pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["checks"]\n', "src/a.py": ""})
    (tmp_path / "checks").mkdir()
    paths, config = default_test_paths([str(tmp_path / "src")])
    assert paths == [str(tmp_path / "checks")]
    assert config is not None and config.rootdir == tmp_path


def test_default_test_paths_fall_back_to_tests_next_to_the_config(tmp_path):
    write(tmp_path, {"pytest.ini": "[pytest]\npython_files = check_*.py\n", "src/a.py": "", "tests/check_a.py": ""})
    paths, config = default_test_paths([str(tmp_path / "src" / "a.py")])
    assert paths == [str(tmp_path / "tests")]
    assert config.python_files == ("check_*.py",)


@pytest.mark.parametrize("project_file", ["pyproject.toml", "setup.py", "setup.cfg"])
def test_a_src_layout_without_pytest_config_finds_tests_at_the_project_root(tmp_path, project_file):
    """`src/pkg` linted, `tests/` beside `src/`, a project file that configures no pytest (a
    `[project]`-only pyproject.toml): the tests are the project root's, as pytest's rootdir."""
    write(tmp_path, {project_file: "[project]\nname = 'pkg'\n", "src/pkg/a.py": "", "tests/test_a.py": ""})
    paths, config = default_test_paths([str(tmp_path / "src" / "pkg")])
    assert paths == [str(tmp_path / "tests")]
    assert config is None


def test_no_test_paths_when_there_are_none(tmp_path):
    write(tmp_path, {"src/a.py": ""})
    paths, _ = default_test_paths([str(tmp_path / "src")])
    assert paths == []


@pytest.mark.parametrize(
    "source",
    [
        "from pkg.flagged import (  # noqa: F401 (used by fixtures)\n    a,\n    b,\n)\n",
        "from pkg import other, \\\n    flagged\n",
        "def test_x():\n    if True:\n        import pkg.flagged as f\n",
        '"""This module does not import anything useful (prose).\nimport this is not code\n"""\n'
        "from pkg import flagged\n",
        "import os; from pkg.flagged import thing\n",
    ],
    ids=["parenthesised-with-comment", "backslash", "indented", "prose-in-docstring", "semicolon"],
)
def test_import_forms_are_seen(project, source):
    (project / "tests" / "test_form.py").write_text(source)
    selection = select_tests([os.path.realpath("pkg/flagged.py")], ["tests/test_form.py"], ["pkg"])
    assert selection.test_files == ("tests/test_form.py",)


def test_stream_code_is_what_the_recognizer_sees_under_the_linted_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path,
        {
            "src/offload.py": (
                "import torch\n\n\ndef plain(x):\n    return x + 1\n\n\n"
                "def offload(x, s):\n    with s:\n        return x.to('cpu', non_blocking=True)\n"
            ),
            "src/plain.py": "import torch\n\n\ndef f(x):\n    return x.sum()\n",
            "src/wrapped.py": (
                "from mypkg.cuda_utils import on_side\n\n\ndef g(x, s):\n    with on_side(s):\n        return x * 2\n"
            ),
            "src/vendored/copy.py": "import torch\n\n\ndef h(s):\n    with torch.cuda.stream(s):\n        pass\n",
        },
    )
    config = Config(
        root=tmp_path,
        exclude=("src/vendored/",),
        spellings=Spellings(stream_contexts=("mypkg.cuda_utils.on_side",)),
    )
    found = stream_code(["src"], config)
    assert found == {
        os.path.realpath("src/offload.py"): [Span(8, 10)],
        os.path.realpath("src/wrapped.py"): [Span(4, 6)],
    }
    assert os.path.realpath("src/wrapped.py") not in stream_code(["src"], Config(root=tmp_path))


OFFLOAD = "import torch\n\n\ndef offload(x, s):\n    with torch.cuda.stream(s):\n        return x.to('cpu', non_blocking=True)\n"  # noqa: E501
SIDE = "import torch\n\nside = torch.cuda.Stream()\n\n\ndef plain(x):\n    return x + 1\n"
STREAMER = "class TextStreamer:\n    def on_event(self, stream, graph):\n        return stream\n"
"""Says "stream", "event" and "graph" but holds no stream API: the prefilter drops it."""


def _parses(monkeypatch) -> list[str]:
    parsed: list[str] = []

    def recording(source, **kwargs):
        parsed.append(source)
        return stream_code_lines(source, **kwargs)

    monkeypatch.setattr(confirm_select, "stream_code_lines", recording)
    return parsed


def test_only_files_the_linters_prefilter_keeps_are_parsed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"src/offload.py": OFFLOAD, "src/streamer.py": STREAMER})
    parsed = _parses(monkeypatch)
    progress: list[tuple[int, int]] = []
    found = stream_code(["src"], Config(root=tmp_path), lambda done, total: progress.append((done, total)))
    assert found == {os.path.realpath("src/offload.py"): [Span(4, 6)]}
    assert parsed == [OFFLOAD]
    assert progress == [(0, 1), (1, 1)]


def test_stream_code_is_read_off_the_static_pass_and_its_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, {"src/offload.py": OFFLOAD, "src/side.py": SIDE, "src/streamer.py": STREAMER})
    config = Config(root=tmp_path)
    expected = {
        str(tmp_path / "src/offload.py"): stream_code_lines(OFFLOAD),
        str(tmp_path / "src/side.py"): stream_code_lines(SIDE),
    }
    cold = lint_paths(["src"], config, cache=True, stream_code=True)
    warm = lint_paths(["src"], config, cache=True, stream_code=True)
    expected[str(tmp_path / "src/streamer.py")] = frozenset()  # the prefilter's no: nothing to read again
    assert cold.stream_code == expected and expected[str(tmp_path / "src/side.py")] == {3}
    assert warm.files_cached == 3 and warm.stream_code == expected
    assert lint_paths(["src"], config, cache=True).stream_code == {}  # asked for only by --confirm
    parsed = _parses(monkeypatch)
    found = stream_code(["src"], config, known=warm.stream_code)
    assert parsed == []
    assert found == {os.path.realpath("src/offload.py"): [Span(4, 6)], os.path.realpath("src/side.py"): [Span(3, 3)]}


def test_files_still_analysed_are_watched_at_once_and_their_spans_come_when_asked_for(tmp_path, monkeypatch):
    """`--confirm` starts its tests while the static pass still analyses the files that hold
    stream code: their names are watched (the keys) without waiting, their spans are those of
    the whole pass once asked for (a test re-run line by line), and nothing is parsed again."""
    monkeypatch.chdir(tmp_path)
    flagged_source = all_rules()[0].INVALID[0].code
    write(tmp_path, {"src/flagged.py": flagged_source, "src/side.py": SIDE, "src/streamer.py": STREAMER})
    config = Config(root=tmp_path)
    whole = lint_paths(["src"], config, stream_code=True)
    expected = watched(whole.findings, ["src"], config, known=whole.stream_code)
    flagged = str(tmp_path / "src/flagged.py")
    assert any(finding.path == "src/flagged.py" for finding in whole.findings) and whole.stream_code[flagged]
    first_findings = [finding for finding in whole.findings if finding.path != "src/flagged.py"]
    first_lines = {path: lines for path, lines in whole.stream_code.items() if path != flagged}
    waited: list[str] = []

    def analyses_done():
        waited.append(flagged)
        return whole.findings, whole.stream_code

    parsed = _parses(monkeypatch)
    later = LaterAnalyses(frozenset({flagged}), analyses_done)
    late = watched(first_findings, ["src"], config, known=first_lines, later=later)
    assert (sorted(late), len(late), waited) == (sorted(expected), len(expected), [])
    assert dict(late) == expected and waited == [flagged]
    assert parsed == []


def test_all_tests_selects_every_test_file_whatever_it_imports(project):
    flagged = os.path.realpath("pkg/flagged.py")
    selection = select_tests([flagged], ["tests"], ["pkg"], all_tests=True)
    assert "tests/test_other.py" in selection.test_files
    assert "tests/test_other.py" not in select_tests([flagged], ["tests"], ["pkg"]).test_files


def test_confirm_says_each_phase_before_the_tests_on_one_line(tmp_path, monkeypatch):
    """Not a terminal (a CI log): a plain line per phase on stderr, no bar."""
    from click.testing import CliRunner

    from csan_lint.lint.shell import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CI", "1")
    write(
        tmp_path,
        {"src/offload.py": OFFLOAD, "src/streamer.py": STREAMER, "tests/test_plain.py": "def test_x(): pass\n"},
    )
    result = CliRunner().invoke(cli.main, ["src", "--confirm", "--no-cache", "--tests", "tests"])
    lines = result.stderr.splitlines()
    assert lines[0] == "Linting src..."
    assert lines[1] == "Finding stream code: 1 from the static pass, 0 file(s) to parse..."
    assert lines[2].startswith("Stream code in 1 file(s) (") and lines[2].endswith(" s).")
    assert lines[3] == "Selecting the tests that import it, among tests..."
    assert lines[4] == "No test imports a module with stream code (looked in: tests)."
