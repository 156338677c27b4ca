"""Children started by `torch.multiprocessing.spawn` while the device is emulated get it too."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a spawned child imports torch: a few seconds

SPAWNING_SCRIPT = """
import torch
import torch.multiprocessing as mp

from csan_lint.runtime import emulation


def child(rank, path):
    with open(path, "w") as out:
        out.write(f"{torch.cuda.is_available()} {torch.nn.Linear(2, 2).cuda().weight.is_cuda}")


if __name__ == "__main__":
    emulation.activate()
    mp.spawn(child, args=(PATH,), nprocs=1)
"""


def test_a_spawned_child_runs_on_the_emulated_device(tmp_path):
    result_path = tmp_path / "child.txt"
    script = tmp_path / "spawning.py"
    script.write_text(SPAWNING_SCRIPT.replace("PATH", repr(str(result_path))))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert result_path.read_text() == "True True"
