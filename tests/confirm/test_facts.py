"""Facts from runs end to end on the emulated device (docs/sanitizer.md, docs/analysis.md):
`pytest --csan --csan-facts` and `csan-lint --confirm --save-facts` save what the run saw of
facts_project/app's functions; `csan-lint --facts` turns an assumption that is off by default
into an observed fact, says where it was observed, settles a default-stream join where every
call was seen entered on the default stream, and drops the fact once the function's text
changes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

FIXTURE = Path(__file__).parent / "facts_project"
SEND_READ = 10
"""The line of `y = x * 2` in app/comm.py, the read of `x` on the side stream."""
GRAD_READ = 19
"""The line of `kept = p.grad * 1` in app/comm.py, the read of `p.grad` on the side stream."""
DEFAULT_JOIN = 27
"""The line of `torch.cuda.default_stream().wait_stream(self.side)` in app/comm.py (CSL102)."""
FETCH_READ = 32
"""The line of `return host.tolist()` in app/comm.py, the host read of a download whose
`non_blocking=` flag is a parameter (CSL301)."""
DRAIN_READ = 36
"""The line of `return out.tolist()` in app/comm.py, the host read of a buffer the caller
handed in, which a non-blocking copy may still be writing where it is pinned (CSL301)."""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("facts_project")
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def saved(project):
    """The facts file a sanitized pytest run wrote, parsed."""
    command = [sys.executable, "-m", "pytest", "--csan", "--csan-device", "emulated", "--csan-report-only"]
    done = subprocess.run(
        [*command, "--csan-facts", "facts.json", "-p", "no:cacheprovider", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((project / "facts.json").read_text())


def lint(project: Path, *options: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "csan_lint", "app/", "--format", "json", *options],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def function(document: dict, qualname: str) -> dict:
    (found,) = [entry for entry in document["functions"] if entry["qualname"] == qualname]
    return found


def test_the_run_saves_each_function_s_entry_stream_arguments_and_copies(saved):
    assert saved["version"] == 1
    assert {entry["module"] for entry in saved["functions"]} == {"app.comm"}
    send = function(saved, "Comm.send")
    # Entered on the default stream although its first op runs under its own side stream.
    assert send["contexts"] == [
        {
            "entry": "default",
            "entry_name": "the default stream",
            "arguments": [{"name": "x", "written": "same", "device": "cuda"}],
            "tests": ["tests/test_comm.py::test_send"],
        }
    ]
    assert send["copies"] == []
    assert send["file"] == "app/comm.py"
    upload = function(saved, "Comm.upload")
    assert upload["contexts"][0]["arguments"] == [{"name": "host", "written": "never", "device": "pinned"}]
    assert upload["copies"] == [
        {"direction": "h2d", "non_blocking": True, "tests": ["tests/test_comm.py::test_upload"]}
    ]


def test_a_parameter_s_gradient_is_an_argument_of_its_own(saved):
    (context,) = function(saved, "Comm.snapshot_grad")["contexts"]
    assert context["arguments"] == [
        {"name": "p", "written": "same", "device": "cuda"},
        {"name": "p.grad", "written": "same", "device": "cuda"},
    ]


def test_a_function_that_enters_its_stream_object_first_is_seen_entered_on_its_caller_s(saved):
    (context,) = function(saved, "Comm.gather")["contexts"]
    assert (context["entry"], context["arguments"]) == (
        "default",
        [{"name": "x", "written": "same", "device": "cuda"}],
    )


def test_a_function_entered_on_a_side_stream_sees_its_argument_written_on_another(saved):
    (context,) = function(saved, "double")["contexts"]
    assert context["entry"] == "side"
    lines = (FIXTURE / "tests" / "test_comm.py").read_text().splitlines()
    made = lines.index("    side = torch.cuda.Stream()") + 1
    assert context["entry_name"] == f"stream created at test_comm.py:{made} (side)"
    assert context["arguments"] == [{"name": "x", "written": "other", "device": "cuda"}]


def test_without_facts_the_static_pass_assumes_and_with_them_it_reports_what_the_run_observed(project, saved):
    status, document, _ = lint(project, "--no-cache")
    assert status == 1
    (joined,) = document["findings"]  # no producer assumed for `x` nor `p.grad`; a join assumed the caller's
    assert (joined["code"], joined["line"], joined["assumptions"]) == ("CSL102", DEFAULT_JOIN, ["default-stream-join"])
    status, document, _ = lint(project, "--no-cache", "--facts", "facts.json")
    assert status == 1
    # Every call of `gather` was entered on the default stream: no CSL102.
    sent, grad, fetched, drained = document["findings"]
    assert (sent["code"], sent["path"], sent["line"]) == ("CSL101", "app/comm.py", SEND_READ)
    assert "observed in tests/test_comm.py::test_send" in sent["message"]
    assert sent["assumptions"] == []
    assert sent["observed"] == [
        "observed in tests/test_comm.py::test_send: `x` came as a cuda tensor last written on the stream the call "
        "was entered on (the default stream)"
    ]
    # An attribute, which `attributes-written-by-caller` (off) would otherwise have to assume.
    assert (grad["code"], grad["line"], grad["assumptions"]) == ("CSL101", GRAD_READ, [])
    assert grad["observed"] == [
        "observed in tests/test_comm.py::test_snapshot_grad: `p.grad` came as a cuda tensor last written on the "
        "stream the call was entered on (the default stream)"
    ]
    # A flag the code does not tell, which `untold-non-blocking-flags-may-be-true` (off) would have to assume.
    assert (fetched["code"], fetched["line"], fetched["assumptions"]) == ("CSL301", FETCH_READ, [])
    assert fetched["observed"] == [
        "observed in tests/test_comm.py::test_fetch: the function made a non-blocking copy to the host"
    ]
    # A destination of unknown kind, which the static pass takes for pageable memory.
    assert (drained["code"], drained["line"], drained["assumptions"]) == ("CSL301", DRAIN_READ, [])
    assert drained["observed"] == [
        "observed in tests/test_comm.py::test_drain: `out` came as a pinned tensor never written on the device"
    ]


def test_the_config_file_names_the_facts_and_the_cache_follows_them(project, saved, tmp_path):
    copy = tmp_path / "configured"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("__pycache__", ".csan_lint_cache"))
    _, document, _ = lint(copy)  # cached without facts first
    assert [finding["line"] for finding in document["findings"]] == [DEFAULT_JOIN]
    (copy / "pyproject.toml").write_text('[tool.csan-lint]\nfacts = "facts.json"\n')
    status, document, _ = lint(copy)
    assert status == 1
    assert [finding["line"] for finding in document["findings"]] == [SEND_READ, GRAD_READ, FETCH_READ, DRAIN_READ]
    _, cached, _ = lint(copy)  # from the cache: the same findings, their facts included
    assert cached["findings"] == document["findings"]
    assert cached["summary"]["files_parsed"] == document["summary"]["files_parsed"]


def test_editing_the_function_ignores_its_facts(project, saved, tmp_path):
    copy = tmp_path / "edited"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("__pycache__", ".csan_lint_cache"))
    comm = copy / "app" / "comm.py"
    comm.write_text(comm.read_text().replace("            y = x * 2\n", "            y = x * 3\n"))
    status, document, stderr = lint(copy, "--no-cache", "--facts", "facts.json", "-v")
    assert [finding["line"] for finding in document["findings"]] == [GRAD_READ, FETCH_READ, DRAIN_READ]
    assert "6 function(s) hold, 1 ignored (changed or gone since the run)" in stderr


def test_confirm_saves_the_same_facts(project, saved, run_confirm):
    done = run_confirm(project, "--save-facts", "confirmed.json", "--timeout", "30")
    assert done.returncode in (0, 1), done.stderr
    confirmed = json.loads((project / "confirmed.json").read_text())
    assert confirmed == saved
