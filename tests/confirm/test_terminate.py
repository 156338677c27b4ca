"""`--confirm` stopped by SIGTERM (`timeout`, a cancelled CI job) takes its test process down
with it, though the tests run in a session of their own that the signal does not reach."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a pytest process on the emulated device

RUNNER = """\
import os
import pathlib
import sys

from csan_lint.lint.model import Span
from csan_lint.runtime.confirm_run import Runner, RunSettings

os.chdir(sys.argv[1])
runner = Runner(RunSettings("emulated", 300.0, pathlib.Path(sys.argv[2])), lambda done, total: None)
runner.run(["tests/test_slow.py"], {os.path.realpath("mod.py"): [Span(1, 2)]})
"""

SLOW_TEST = """\
import os
import pathlib
import time


def test_slow():
    pathlib.Path(__file__).parent.with_name("pid").write_text(str(os.getpid()))
    time.sleep(300)
"""


def test_a_terminated_run_kills_its_test_process(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "mod.py").write_text("x = 1\ny = 2\n")
    (project / "tests" / "test_slow.py").write_text(SLOW_TEST)
    (tmp_path / "work").mkdir()
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(project), str(tmp_path / "work")])
    pid_file = project / "pid"
    deadline = time.monotonic() + 180
    while not pid_file.exists():
        assert runner.poll() is None, "the runner ended before the test started"
        assert time.monotonic() < deadline, "the test did not start"
        time.sleep(0.2)
    tests_pid = int(pid_file.read_text())
    try:
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            os.kill(tests_pid, 0)  # killed and reaped by the runner, not left orphaned
    finally:
        try:
            os.killpg(tests_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
