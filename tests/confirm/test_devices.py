"""`csan-lint --confirm --devices N`: the tests run on an emulated machine of N devices (pytest's
`--csan-devices`), in the sanitized run and in the run without the sanitizer alike."""

from __future__ import annotations

import json

import pytest

APP = """
import torch


def scale_on_the_second_gpu(values):
    side = torch.cuda.Stream(device=1)
    side.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.stream(side):
        moved = values.to("cuda:1") * 2
    torch.cuda.current_stream(1).wait_stream(side)
    return moved
"""

TEST = """
import torch

from app.multi import scale_on_the_second_gpu


def test_scales_on_the_second_gpu():
    assert torch.cuda.device_count() == 2
    out = scale_on_the_second_gpu(torch.ones(8, device="cuda:0"))
    assert out.get_device() == 1 and out.sum().item() == 16
"""

NODE = "tests/test_multi.py::test_scales_on_the_second_gpu"


@pytest.fixture
def project(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "multi.py").write_text(APP)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_multi.py").write_text(TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    return tmp_path


@pytest.mark.slow
def test_a_test_that_needs_two_devices_passes_with_devices_2_and_fails_without(project, run_confirm):
    done = run_confirm(project, "--devices", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert {test["nodeid"]: test["outcome"] for test in document["tests"]}[NODE] == "passed"
    assert document["failures"] == []
    done = run_confirm(project)
    assert done.returncode == 1, done.stdout + done.stderr
    failures = json.loads(done.stdout)["failures"]
    assert [failure["nodeid"] for failure in failures] == [NODE]
    assert failures[0]["reason"].startswith("AssertionError: assert 1 == 2")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--devices", "0"), "--devices: expected a number of devices (1 or more), got 0"),
        (("--devices", "65"), "--csan-devices: CSAN_LINT_DEVICES: expected a number of devices from 1 to 64, got '65'"),
    ],
)
@pytest.mark.slow
def test_a_bad_device_count_is_a_usage_error(project, run_confirm, options, message):
    done = run_confirm(project, *options)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
