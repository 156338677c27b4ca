"""The fix is a real fix: an example that races on the emulated device runs race-free once
`csan-lint --fix` has been applied to it (a copy: the example stays buggy for the demo).
CSL101 (offload), CSL102 and CSL201 (metrics), CSL103 (ema), CSL301 (readback)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from csan_lint.lint.shell.cli import main

pytest.importorskip("torch")
import torch
from torch import nn

from csan_lint.runtime import sanitize

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(path: Path) -> ModuleType:
    name = f"_csan_fix_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _races(path: Path, exercise: Callable[[ModuleType], None]) -> list[str]:
    """Error kinds the sanitizer reports while `exercise` runs the module at `path`."""
    module = _load(path)
    with sanitize(device="emulated") as sanitizer:
        exercise(module)
    assert not sanitizer.internal_errors
    return [report.kind for report in sanitizer.errors]


def _fixed_copy(example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    buggy = tmp_path / "buggy" / example
    fixed = tmp_path / "fixed" / example
    for copy in (buggy, fixed):
        copy.parent.mkdir()
        shutil.copyfile(EXAMPLES / example, copy)
    monkeypatch.chdir(fixed.parent)
    result = CliRunner().invoke(main, ["--fix", "--no-cache", example])
    assert result.exit_code == 0, result.output  # every finding in it was fixed
    assert "remaining" in result.stderr and "(0 remaining)" in result.stderr
    return buggy, fixed


def _accuracy(module: ModuleType) -> None:
    torch.manual_seed(0)
    model = nn.Linear(6, 3).cuda()
    batches = [(torch.randn(10, 6).cuda(), torch.randint(0, 3, (10,)).cuda()) for _ in range(3)]
    module.Evaluator(model).accuracy(batches)


def _offload(module: ModuleType) -> None:
    torch.manual_seed(0)
    layers = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)]).cuda()
    module.ActivationOffloader(layers, batch_size=4).forward(torch.randn(4, 8).cuda())


def _readback(module: ModuleType) -> None:
    torch.manual_seed(0)
    weight = torch.randn(8, 1).cuda()
    logger = module.LossLogger()
    for _ in range(2):
        logger.log((torch.randn(16, 8).cuda() @ weight).pow(2).mean())


def test_fixed_readback_example_reads_the_copy_after_it_lands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buggy, fixed = _fixed_copy("readback_buggy.py", tmp_path, monkeypatch)
    assert "host-read-pending" in _races(buggy, _readback)
    assert _races(fixed, _readback) == []


def _ema(module: ModuleType) -> None:
    torch.manual_seed(0)
    batches = [(inputs.cuda(), (inputs @ torch.ones(4, 1)).cuda()) for inputs in torch.randn(3, 16, 4)]
    module.EMATrainer(torch.zeros(4, 1).cuda(), lr=0.1, decay=0.9).fit(batches)


def test_fixed_ema_example_waits_before_the_overwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buggy, fixed = _fixed_copy("ema_buggy.py", tmp_path, monkeypatch)
    assert "write-after-read" in _races(buggy, _ema)
    assert _races(fixed, _ema) == []


def test_fixed_metrics_example_runs_race_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buggy, fixed = _fixed_copy("metrics_buggy.py", tmp_path, monkeypatch)
    assert _races(buggy, _accuracy), "the buggy example should race on the emulated device"
    assert _races(fixed, _accuracy) == []


def test_fixed_offload_example_loses_its_read_after_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offloading also frees `x` while the copy reads it: a race only the sanitizer sees
    (examples/EXPECTED.md), which no static fix touches; the CSL101 race is what must go."""
    buggy, fixed = _fixed_copy("offload_buggy.py", tmp_path, monkeypatch)
    assert "read-after-write" in _races(buggy, _offload)
    assert "read-after-write" not in _races(fixed, _offload)
