"""The GPU check (benchmarks/gpu/): its steps on the emulated device, its summary's verdict, and
check.sh's refusal to run without what it needs. The whole check on the emulated device is run by
hand (`bash benchmarks/gpu/check.sh --device emulated`: several minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"
sys.path.insert(0, str(HERE))

import check  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_live_scenarios_give_their_kinds_on_the_emulated_device():
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(HERE / "scenarios.py"), "--device", "emulated"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("ok")]
    assert len(lines) == 10


def test_a_failed_step_fails_the_check_and_a_skipped_one_does_not(tmp_path, monkeypatch, capsys):
    def step(ok: bool | None) -> dict:
        return {"ok": ok, "seconds": 1.0}

    monkeypatch.setattr(check, "environment", lambda device: {"ok": True, "missing_internals": []})
    monkeypatch.setattr(check, "gpu_tests", lambda d, t: {**step(True), "passed": 3, "failed": 0, "skipped": 2})
    monkeypatch.setattr(
        check, "examples", lambda d, t: {**step(False), "as_expected": 1, "expected": 2, "differing": ["x"]}
    )
    monkeypatch.setattr(check, "scenarios", lambda d, t: {**step(True), "passed": 1, "total": 1})
    monkeypatch.setattr(check, "fidelity", lambda d, f, t: {"ok": None, "skipped": "no copy"})
    monkeypatch.setattr(
        check, "overhead", lambda d, t: {"ok": True, "seconds": {"unchecked": 1.0}, "ratio_to_unchecked": {}}
    )
    report = tmp_path / "report.json"
    assert check.main(["--device", "emulated", "--json", str(report)]) == 1
    out = capsys.readouterr().out
    assert "FAIL examples --confirm: 1/2" in out and "skip TestCuda selection" in out and "FAILED in" in out
    assert '"ok": false' in report.read_text()


def test_check_sh_refuses_to_run_without_wheels(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "CSAN_WHEELS": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(HERE / "check.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert "no csan_lint wheel" in done.stderr and "build_wheels.sh" in done.stderr
