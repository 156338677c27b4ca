"""`lint_paths`: prefilter accounting, parallel == serial, and failures that stay local to a file.
Sources with findings are the rules' own INVALID examples, so these tests follow the real rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from csan_lint.lint.model import NO_SPELLINGS
from csan_lint.lint.registry import SYNTAX_ERROR_CODE, all_rules
from csan_lint.lint.shell import runner
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.files import might_have_findings
from csan_lint.lint.shell.runner import INTERNAL_ERROR_CODE, READ_ERROR_CODE, lint_paths

FLAGGED = [example.code for rule in all_rules() for example in rule.INVALID]
CLEAN = [example.code for rule in all_rules() for example in rule.VALID]
BROKEN = "import torch\n\nwith torch.cuda.stream(side)\n    pass\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_files_without_stream_words_are_not_parsed(project: Path) -> None:
    (project / "flagged.py").write_text(FLAGGED[0])
    (project / "plain.py").write_text("def f(x):\n    return x + 1\n")
    (project / "broken_plain.py").write_text("def f(:\n")  # cannot hold a stream bug, but is broken
    result = lint_paths(["."], Config(root=project))
    assert (result.files_checked, result.files_parsed) == (3, 1)
    assert {finding.path for finding in result.findings} == {"flagged.py", "broken_plain.py"}
    broken = [finding for finding in result.findings if finding.path == "broken_plain.py"]
    assert [(f.code, f.line, f.column) for f in broken] == [("CSL001", 1, 7)]


CODE_GENERATOR = """\
import torch


def emit_kernel_call(out, kernel, args):
    call = ", ".join(args)
    out.writeline(f"{kernel}_done = torch.Event()")
    printer = out.debug_printer
    with printer:
        out.writeline(f"{kernel}.run({call})")
"""
"""Inductor's wrapper codegen in miniature: its stream API is in the code it writes out, and
`printer` is a debug printer, not a stream. Parsed, the analysis took `with printer:` for a
side stream and `call` (a str) for a tensor read on it: false CSL101 on torch."""


def test_a_code_generator_writing_stream_code_into_strings_is_not_parsed(project: Path) -> None:
    (project / "wrapper.py").write_text(CODE_GENERATOR)
    result = lint_paths(["."], Config(root=project))
    assert (result.files_parsed, result.findings) == (0, [])


def test_parallel_and_serial_runs_agree(project: Path) -> None:
    sources = [*FLAGGED, *CLEAN, BROKEN]
    for index, source in enumerate(sources):
        (project / f"m{index:02}.py").write_text(source)
    config = Config(root=project)
    serial = lint_paths(["."], config, jobs=1)
    parallel = lint_paths(["."], config, jobs=2)
    assert parallel == serial
    assert serial.files_parsed == sum(map(might_have_findings, sources)) > len(FLAGGED)
    assert len({finding.path for finding in serial.findings}) >= len(FLAGGED) + 1
    assert serial.findings == sorted(serial.findings, key=lambda f: (f.path, f.line, f.column, f.code))


def test_work_left_running_in_the_background_ends_as_the_whole_lint(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--confirm`'s staging: first the files known to hold stream code (not yet analysed) and the
    findings and stream code of the parsed files that hold none; then the analyses of the former
    and the syntax checks of the files the prefilter rejected (a broken one among them), in
    worker processes, end as the same result `lint_paths` gives, with all of it in the cache."""
    monkeypatch.setattr(runner, "PARALLEL_MIN_BYTES", 0)  # worker processes even for a few files
    (project / "flagged.py").write_text(FLAGGED[0])
    (project / "names_only.py").write_text("from torch.cuda import Stream\n\n\ndef f(x):\n    return x\n")
    (project / "broken_plain.py").write_text("def f(:\n")
    for index in range(6):
        (project / f"plain{index}.py").write_text(f"def f{index}(x):\n    return x + {index}\n")
    config = Config(root=project)
    whole = lint_paths(["."], config, jobs=1, stream_code=True)
    flagged = str(project / "flagged.py")
    assert whole.stream_code[flagged] and not whole.stream_code[str(project / "names_only.py")]
    with runner.lint_in_stages(["."], config, jobs=2, cache=True, stream_code=True, checks_later=True) as staged:
        assert (staged.checking, staged.analysing) == (7, {flagged})
        assert staged.first.findings == []
        assert staged.first.stream_code == {path: lines for path, lines in whole.stream_code.items() if path != flagged}
        assert staged.result() == whole
        assert staged.checking == 0
    cached = lint_paths(["."], config, cache=True, stream_code=True)
    assert (cached.files_cached, cached.findings, cached.stream_code) == (9, whole.findings, whole.stream_code)


def test_a_syntax_error_does_not_stop_the_other_files(project: Path) -> None:
    (project / "a_broken.py").write_text(BROKEN)
    (project / "b_flagged.py").write_text(FLAGGED[0])
    result = lint_paths(["."], Config(root=project))
    broken = [finding for finding in result.findings if finding.path == "a_broken.py"]
    assert [finding.code for finding in broken] == [SYNTAX_ERROR_CODE]
    assert broken[0].line in (3, 4)  # the `with` missing its colon, or where the parser noticed
    assert broken[0].message.startswith("syntax error")
    assert any(finding.path == "b_flagged.py" for finding in result.findings)
    assert not result.has_tool_errors


def test_an_engine_crash_is_a_diagnostic_for_that_file_only(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_lint_source = runner.lint_source

    def crashing(source: str, path: str, rules=None, package=None, spellings=NO_SPELLINGS, assumptions=None, **_):
        if path == "crash.py":
            raise KeyError("boom")
        return real_lint_source(source, path, rules, package, spellings)

    monkeypatch.setattr(runner, "lint_source", crashing)
    (project / "crash.py").write_text(FLAGGED[0])
    (project / "flagged.py").write_text(FLAGGED[0])
    result = lint_paths(["."], Config(root=project), jobs=1)
    crash = [finding for finding in result.findings if finding.path == "crash.py"]
    assert [finding.code for finding in crash] == [INTERNAL_ERROR_CODE]
    assert crash[0].message.startswith("internal error: KeyError: 'boom' (at test_runner.py:")
    assert any(finding.path == "flagged.py" for finding in result.findings)
    assert result.has_tool_errors


def test_unreadable_input_is_located_and_the_rest_is_linted(project: Path) -> None:
    (project / "latin.py").write_bytes(b"import torch\n\n# caf\xe9\nwith torch.cuda.stream(s):\n    pass\n")
    (project / "cookie.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nx = 1\n")
    (project / "flagged.py").write_text(FLAGGED[0])
    result = lint_paths(["latin.py", "cookie.py", "missing.py", "flagged.py"], Config(root=project))
    errors = [(f.path, f.line, f.column, f.code) for f in result.findings if f.code == READ_ERROR_CODE]
    assert errors == [("latin.py", 3, 6, READ_ERROR_CODE), ("missing.py", 1, 1, READ_ERROR_CODE)]
    assert any(finding.path == "flagged.py" for finding in result.findings)
    assert not any(finding.path == "cookie.py" for finding in result.findings)  # PEP 263 honoured
