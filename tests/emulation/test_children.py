"""Child processes of an emulated run run on the emulated device too: a `python -c` child, the
workers of `multiprocessing` (spawn, forkserver) and `torch.multiprocessing.spawn`."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # each child imports torch: seconds

CHILD_CODE = "import torch; print(torch.cuda.is_available(), torch.ones(2, device='cuda').device)"


def test_a_python_child_of_an_emulated_run_is_emulated(device):
    done = subprocess.run([sys.executable, "-c", CHILD_CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "cuda:0"]


def test_a_child_started_after_the_emulation_ends_is_not_emulated():
    from csan_lint.runtime import emulation

    with emulation.emulated():
        pass
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["False"], done.stderr[-2000:]


def test_a_child_keeps_its_own_sitecustomize(device, tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE_RAN = True\n")
    import os

    env = {**os.environ, "PYTHONPATH": os.environ["PYTHONPATH"] + os.pathsep + str(tmp_path)}
    code = "import builtins, torch; print(builtins.USER_SITE_RAN, torch.cuda.is_available())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == ["True", "True"], done.stderr[-2000:]


WORKERS_SCRIPT = """
import multiprocessing
import sys

import torch
import torch.multiprocessing as mp

from csan_lint.runtime import emulation


def probe(_):
    return f"{torch.cuda.is_available()} {torch.nn.Linear(2, 2).cuda().weight.device}"


def child(rank, path):
    with open(path, "w") as out:
        out.write(probe(rank))


if __name__ == "__main__":
    emulation.activate()
    for method in ("spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            print(method, pool.map(probe, [0])[0])
    mp.spawn(child, args=(sys.argv[1],), nprocs=1)
    print("torch.multiprocessing.spawn", open(sys.argv[1]).read())
"""


def test_multiprocessing_workers_of_an_emulated_run_are_emulated(tmp_path):
    script = tmp_path / "workers.py"
    script.write_text(WORKERS_SCRIPT)
    result = tmp_path / "child.txt"
    done = subprocess.run([sys.executable, str(script), str(result)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "spawn True cuda:0",
        "forkserver True cuda:0",
        "torch.multiprocessing.spawn True cuda:0",
    ]
