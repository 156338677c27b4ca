"""The interpreter `--confirm` starts before its static pass runs the pytest command later as
`python -m` would have run it then: arguments, working directory, environment, `sys.path[0]`,
exit status and output; only the preloaded modules differ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from csan_lint.runtime.warm_python import WarmPython

SHOW = """\
import json, os, sys
print(json.dumps({
    "argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0], "name": __name__,
    "probe": os.environ.get("WARM_PROBE"), "preloaded": "csv" in sys.modules,
}))
print("to stderr", file=sys.stderr)
raise SystemExit(3)
"""


def test_a_warm_interpreter_runs_a_module_as_python_dash_m_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "show.py").write_text(SHOW)
    monkeypatch.chdir(tmp_path)
    command = [sys.executable, "-m", "show", "a", "b c"]
    with WarmPython(sys.executable, preload=("csv",)) as warm:
        monkeypatch.setenv("WARM_PROBE", "set after it started")
        assert warm.runs(command) and not warm.runs([sys.executable, "script.py"])
        process = warm.run(command, tmp_path / "log")
        assert process is not None and process.wait(timeout=120) == 3
        assert not warm.runs(command)  # once
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    logged = (tmp_path / "log").read_text().splitlines()  # stdout and stderr, in either order
    (shown,) = [line for line in logged if line.startswith("{")]
    assert (plain.returncode, plain.stderr.strip(), sorted(logged)[0]) == (3, "to stderr", "to stderr")
    got, expected = json.loads(shown), json.loads(plain.stdout)
    assert got == {**expected, "preloaded": True}
    assert expected["preloaded"] is False and expected["probe"] == "set after it started"
    assert (expected["argv"], expected["name"], expected["path0"]) == (["a", "b c"], "__main__", str(tmp_path))


def test_an_unused_warm_interpreter_is_ended(tmp_path: Path) -> None:
    warm = WarmPython(sys.executable, preload=())
    process = warm._process
    assert process is not None
    warm.close()
    assert process.poll() is not None and not warm.runs([sys.executable, "-m", "pytest"])
