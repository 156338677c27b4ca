"""A Python interpreter started ahead of the pytest run `--confirm` makes, so that importing torch
(most of the seconds before the first test) overlaps the static pass instead of following it.

It imports the modules it is given, then waits for one line on its stdin: the module to run as
`python -m` would (`pytest`), its arguments, the working directory, the environment and the log
file. It then becomes that process: `python -m pytest ...` with stdout and stderr in the log, in
its own session (the runner kills its process group). Only modules that import the same
whatever the run (torch, pytest, coverage; never the user's code, whose import the probe
watches) are taken early.
Told nothing (stdin closed), it exits.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

PRELOADED = ("torch", "pytest", "coverage")
"""What the interpreter imports while it waits: torch, and what every `--confirm` pytest run
imports before the first test (its per-test line probe uses coverage). Not pytest's plugins:
pytest rewrites the asserts of a plugin's package, and warns about one imported before it."""
_BOOT = """\
import json, os, runpy, sys
for name in sys.argv[1:]:
    try:
        __import__(name)
    except Exception:  # the run itself meets the error again, and reports it
        pass
line = sys.stdin.readline()
if not line:
    raise SystemExit(0)
order = json.loads(line)
os.chdir(order["cwd"])
os.environ.clear()
os.environ.update(order["env"])
log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
os.close(log)
sys.stdin.close()
sys.path[0] = order["cwd"]  # as `python -m` has it
sys.argv = [order["module"], *order["argv"]]
runpy.run_module(order["module"], run_name="__main__", alter_sys=True)
"""


class WarmPython:
    """One interpreter started now and run (`run`) at most once; `close` ends it unused."""

    def __init__(self, python: str, preload: Sequence[str] = PRELOADED) -> None:
        self.python = python
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [python, "-c", _BOOT, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def runs(self, command: Sequence[str]) -> bool:
        """Whether `command` is `python -m MODULE ...` with this interpreter, not run yet."""
        return self._process is not None and len(command) >= 3 and command[0] == self.python and command[1] == "-m"

    def run(self, command: Sequence[str], log: Path) -> subprocess.Popen[bytes] | None:
        """`command` (`python -m MODULE ARGS`) in this interpreter, as `subprocess.Popen` with
        stdout and stderr to `log` would run it from here, now; None if the interpreter died."""
        assert self._process is not None and self.runs(command)
        process, self._process = self._process, None
        order = {"module": command[2], "argv": list(command[3:]), "cwd": os.getcwd(), "env": dict(os.environ)}
        stdin = process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({**order, "log": str(log)}).encode() + b"\n")
            stdin.close()
        except OSError:  # it died on its imports: the caller starts a fresh one
            _end(process)
            return None
        return process

    def close(self) -> None:
        """End it if it was never run."""
        if self._process is not None:
            process, self._process = self._process, None
            _end(process)

    def __enter__(self) -> WarmPython:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        try:
            process.stdin.close()
        except OSError:
            pass
    process.kill()
    process.wait()
