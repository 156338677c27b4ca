"""The pytest plugin, run for real in a subprocess on a small GPU test module (emulated device)."""

from __future__ import annotations

import json

import pytest
import torch

# Every test here runs pytest in a subprocess that imports torch: a few seconds each.
pytestmark = pytest.mark.slow

EMULATED = ("--csan-device", "emulated")
no_real_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="expects a machine without CUDA")

GPU_TESTS = """
import os
import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@requires_cuda
def test_racy():
    a = torch.rand(4, 2, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.mul(a, 5, out=a)
    torch.cuda.synchronize()


@requires_cuda
def test_clean():
    a = torch.rand(4, 2, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.mul(a, 5, out=a)
    torch.cuda.synchronize()


@requires_cuda
@pytest.mark.csan(enabled=False)
def test_racy_opted_out():
    a = torch.rand(4, 2, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        torch.mul(a, 5, out=a)
    torch.cuda.synchronize()
"""


@pytest.fixture
def gpu_tests(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_gpu=GPU_TESTS)
    return pytester


def read_report(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@no_real_gpu
def test_inert_without_options(gpu_tests: pytest.Pytester):
    result = gpu_tests.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*needs CUDA*"])


def test_csan_fails_the_racy_test_passes_the_clean_ones_and_writes_the_report(gpu_tests: pytest.Pytester):
    path = gpu_tests.path / "csan.jsonl"
    result = gpu_tests.runpytest_subprocess("--csan", *EMULATED, f"--csan-report={path}")
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_racy*",
            "*CUDA stream sanitizer: 1 race(s)*",
            "*write-after-write*aten::mul.out*",
            "FAILED test_gpu.py::test_racy - *",
        ]
    )
    records = read_report(path)
    assert records[0] == {"type": "session", "version": 1, "device": "emulated"}
    types = [(r["type"], r.get("nodeid")) for r in records[1:]]
    assert types == [
        ("test-start", "test_gpu.py::test_racy"),
        ("race", "test_gpu.py::test_racy"),
        ("test-end", "test_gpu.py::test_racy"),
        ("test-start", "test_gpu.py::test_clean"),
        ("test-end", "test_gpu.py::test_clean"),
        ("test-start", "test_gpu.py::test_racy_opted_out"),
        ("test-end", "test_gpu.py::test_racy_opted_out"),
    ]
    race = records[2]["report"]
    assert race["kind"] == "write-after-write"
    assert race["current"]["operator"].startswith("aten::mul")
    source = (gpu_tests.path / "test_gpu.py").read_text().splitlines()
    assert race["current"]["stack"][-1]["line"] == source.index("        torch.mul(a, 5, out=a)") + 1
    assert race["previous"]["stack"][-1]["line"] == source.index('    a = torch.rand(4, 2, device="cuda")') + 1
    outcomes = [r["outcome"] for r in records if r["type"] == "test-end"]
    assert outcomes == ["failed", "passed", "passed"]
    assert "race" in records[3]["longrepr"]


def test_report_only_passes_but_reports(gpu_tests: pytest.Pytester):
    result = gpu_tests.runpytest_subprocess("--csan", *EMULATED, "--csan-report-only", "-rP")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*csan*", "*write-after-write*"])


@no_real_gpu
def test_asking_for_a_real_gpu_without_one_is_a_usage_error(gpu_tests: pytest.Pytester):
    result = gpu_tests.runpytest_subprocess("--csan", "--csan-device", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--csan-device: device 'cuda' asked for, but torch sees no real CUDA device*"])


def test_unwritable_report_path_is_a_usage_error(gpu_tests: pytest.Pytester):
    result = gpu_tests.runpytest_subprocess("--csan", *EMULATED, "--csan-report=missing/dir/r.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--csan-report: cannot write missing/dir/r.jsonl*"])


def test_emulate_runs_gpu_tests_without_checking(gpu_tests: pytest.Pytester):
    path = gpu_tests.path / "csan.jsonl"
    result = gpu_tests.runpytest_subprocess("--csan-emulate", f"--csan-report={path}")
    result.assert_outcomes(passed=3)
    records = read_report(path)
    assert records[0]["device"] == "emulated"
    assert "race" not in [r["type"] for r in records]


def test_crash_mid_test_keeps_the_lines_written_before(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_crash="""
import os
import torch

def test_first():
    torch.ones(2, device="cuda").add_(1)

def test_races_then_dies():
    a = torch.rand(4, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        a.mul_(2)
    os._exit(3)
"""
    )
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", *EMULATED, f"--csan-report={path}")
    assert result.ret == 3
    records = read_report(path)
    assert [r["type"] for r in records] == ["session", "test-start", "test-end", "test-start", "race"]
    assert records[4]["nodeid"] == "test_crash.py::test_races_then_dies"


def test_internal_error_is_reported_not_a_user_failure(pytester: pytest.Pytester):
    pytester.makeconftest(
        """
import pytest

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    session = config.pluginmanager.get_plugin("csan-session")
    def broken(*args, **kwargs):
        raise ZeroDivisionError("engine bug")
    session.sanitizer.tracker.kernel_launched = broken
"""
    )
    pytester.makepyfile(
        test_ok="""
import torch

def test_uses_the_device():
    x = torch.ones(2, device="cuda")
    assert (x + 1).sum().item() == 4

def test_next_one_is_checked_again():
    assert torch.ones(1, device="cuda").item() == 1
"""
    )
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", *EMULATED, f"--csan-report={path}", "-W", "error::RuntimeWarning")
    result.assert_outcomes(passed=2)
    records = read_report(path)
    internal = [r for r in records if r["type"] == "internal-error"]
    assert len(internal) == 1
    assert internal[0]["nodeid"] == "test_ok.py::test_uses_the_device"
    assert "ZeroDivisionError: engine bug" in internal[0]["message"]


IMPORT_TIME_PROBE = """
import pytest
import torch

DEVICE_AT_IMPORT = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def device_at_import():
    return DEVICE_AT_IMPORT
"""


@no_real_gpu
@pytest.mark.parametrize("flags", [("--csan", *EMULATED), ("--csan-emulate",)])
def test_a_conftest_probing_the_device_at_import_sees_the_emulated_one(pytester: pytest.Pytester, flags):
    pytester.makeconftest(IMPORT_TIME_PROBE)
    pytester.makepyfile(test_probe="def test_probe(device_at_import):\n    assert device_at_import == 'cuda'\n")
    pytester.runpytest_subprocess(*flags).assert_outcomes(passed=1)


def test_a_test_failing_on_an_emulation_gap_is_named_in_the_summary_and_fails_the_session(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_gap="""
import torch

def test_ipc():
    torch.cuda.Event(interprocess=True).ipc_handle()

def test_own():
    raise ValueError("mine\\nnot this line")

def test_fine():
    assert torch.ones(1, device="cuda").item() == 1.0
"""
    )
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", *EMULATED, f"--csan-report={path}")
    result.assert_outcomes(passed=1, failed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*csan: failed on the emulated device's gaps, not on the tests' code*",
            "test_gap.py::test_ipc: the emulated device does not support interprocess events "
            "(`torch.cuda.Event.ipc_handle`), called as `torch.cuda.Event(interprocess=True).ipc_handle()` "
            "at test_gap.py:4: please report it*",
        ]
    )
    assert "test_gap.py::test_own: " not in result.stdout.str()  # the test's own failure is no gap
    ends = {r["nodeid"]: r for r in read_report(path) if r["type"] == "test-end"}
    assert ends["test_gap.py::test_ipc"]["gap"].startswith("the emulated device does not support interprocess events")
    assert ends["test_gap.py::test_own"]["reason"] == "ValueError: mine"
    assert ends["test_gap.py::test_own"]["gap"] is None
    assert ends["test_gap.py::test_fine"]["reason"] is None


RACY_TWICE = """
import torch

def race(noqa):
    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    with torch.cuda.stream(side):
        if noqa:
            y = x + 1  # noqa: CSL901
        else:
            y = x + 1
    torch.cuda.synchronize()

def test_racy():
    race(False)

def test_racy_suppressed():
    race(True)
"""


def test_runtime_codes_are_ignored_by_option_ini_and_noqa(pytester: pytest.Pytester):
    pytester.makepyfile(test_codes=RACY_TWICE)
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", *EMULATED, f"--csan-report={path}")
    result.assert_outcomes(passed=1, failed=1)  # the noqa'd race neither fails nor shows
    result.stdout.fnmatch_lines(["FAILED test_codes.py::test_racy - *"])
    assert len([r for r in read_report(path) if r["type"] == "race"]) == 2  # both are still in the report
    pytester.runpytest_subprocess("--csan", *EMULATED, "--csan-ignore", "CSL9").assert_outcomes(passed=2)
    pytester.makeini("[pytest]\ncsan_ignore = runtime-read-after-write\n")
    pytester.runpytest_subprocess("--csan", *EMULATED).assert_outcomes(passed=2)
    refused = pytester.runpytest_subprocess("--csan", *EMULATED, "--csan-ignore", "CSL101")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--csan-ignore: `CSL101` names no runtime code*"])
