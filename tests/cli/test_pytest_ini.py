"""The pytest plugin switched on from a project's ini file, as a project keeps it in
pyproject.toml: `csan`, `csan_device`, `csan_report`, `csan_report_only`; a flag still wins."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # each test runs pytest in a subprocess that imports torch

RACY = """
import torch


def test_racy():
    a = torch.rand(4, 2, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.mul(a, 5, out=a)
    torch.cuda.synchronize()
"""


def _project(pytester: pytest.Pytester, settings: str) -> pytest.Pytester:
    pytester.makepyfile(test_gpu=RACY)
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{settings}")
    return pytester


def test_the_ini_turns_the_sanitizer_on_and_writes_the_report(pytester: pytest.Pytester) -> None:
    _project(pytester, 'csan = true\ncsan_device = "emulated"\ncsan_report = "out/csan.jsonl"\n')
    (pytester.path / "out").mkdir()
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CUDA stream sanitizer: 1 race(s)*"])
    lines = [json.loads(line) for line in (pytester.path / "out" / "csan.jsonl").read_text().splitlines()]
    assert lines[0] == {"type": "session", "version": 1, "device": "emulated"}
    assert [line["type"] for line in lines].count("race") == 1


def test_report_only_from_the_ini_and_a_flag_over_it(pytester: pytest.Pytester) -> None:
    _project(pytester, 'csan = true\ncsan_device = "emulated"\ncsan_report_only = true\n')
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("--csan-device", "cuda")  # the flag wins: no GPU here
    if not result.ret == pytest.ExitCode.USAGE_ERROR:
        pytest.skip("a CUDA device is present: --csan-device cuda is valid here")
    result.stderr.fnmatch_lines(["*--csan-device*"])


def test_a_bad_device_in_the_ini_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, 'csan = true\ncsan_device = "gpu"\n')
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option csan_device: expected one of auto, cuda, emulated, got 'gpu'*"])


def test_without_the_ini_or_a_flag_the_plugin_stays_off(pytester: pytest.Pytester) -> None:
    _project(pytester, 'csan_device = "emulated"\n')
    result = pytester.runpytest_subprocess()
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    assert "CUDA stream sanitizer" not in result.stdout.str()
