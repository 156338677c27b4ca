"""The same source gives the same findings on every run: no choice may follow a set's order of
libcst nodes, which hash by address (so PYTHONHASHSEED alone does not fix it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import libcst as cst

from csan_lint.lint.engine import lint_source
from csan_lint.lint.ordering import Access, Mark, in_report_order

BUFFERS = 8


def _helper_writes_then_reads() -> str:
    """A helper writes each buffer on a side stream and reads it there after; the caller then
    overwrites every buffer on its own stream without a join."""
    fill = "".join(
        f"            self.buf{i}.copy_(x)\n            self.total{i} = self.buf{i}.sum()\n" for i in range(BUFFERS)
    )
    overwrite = "".join(f"        self.buf{i}.zero_()\n" for i in range(BUFFERS))
    return (
        "import torch\n\n\nclass Pipeline:\n"
        "    def __init__(self):\n        self.side = torch.cuda.Stream()\n\n"
        "    def _fill(self, x):\n        with torch.cuda.stream(self.side):\n" + fill + "\n"
        "    def step(self, x):\n        self._fill(x)\n" + overwrite
    )


def test_a_helpers_reads_after_its_writes_survive_the_call() -> None:
    """Each overwrite races with the helper's write (CSL102) and with its read (CSL103). Replayed
    in set order, a write could come after the read it precedes and erase it: each buffer kept
    its CSL103 by chance (2 to 5 of the 8 in four runs before the replay was ordered)."""
    findings = lint_source(_helper_writes_then_reads(), "pipeline.py")
    overwritten = {f"self.buf{i}" for i in range(BUFFERS)}
    for code in ("CSL102", "CSL103"):
        assert {finding.message.split("'")[1] for finding in findings if finding.code == code} == overwritten


PENDING_COPIES = """\
import torch


def f(x, y, ready):
    if ready:
        host = x.to("cpu", non_blocking=True)
    else:
        host = y.to("cpu", non_blocking=True)
    print(host)
"""


def test_a_read_racing_with_copies_on_two_paths_names_the_first() -> None:
    [finding] = [f for f in lint_source(PENDING_COPIES, "m.py") if f.code == "CSL301"]
    assert "(line 6)" in finding.message


def _lint_in_process(directory: Path, seed: str) -> str:
    environment = {**os.environ, "PYTHONHASHSEED": seed}
    command = [sys.executable, "-m", "csan_lint", "check", "--no-cache", "--format", "json", "."]
    result = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr  # findings, no error
    return result.stdout


def test_two_processes_with_different_hash_seeds_agree(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(_helper_writes_then_reads())
    (tmp_path / "copies.py").write_text(PENDING_COPIES)
    first, second = _lint_in_process(tmp_path, "1"), _lint_in_process(tmp_path, "2")
    assert '"CSL103"' in first
    assert first == second


def test_racing_writes_are_reported_in_an_order_of_their_own() -> None:
    """Several possible last writes race with one read: which one the message names must not
    follow the set's order, which follows the nodes' addresses (TE's userbuffers backward named
    the caller's write in some runs and the function's own in others). The function's own
    writes come first, then by stream."""
    marks = [
        Mark(Access(cst.Name(f"n{i}"), stream, True, cst.Name("s"), "f", produced), frozenset({stream}))
        for i, (stream, produced) in enumerate(
            [("<current>", "by the caller"), ("side", "written"), ("<current>", "written"), ("side", "allocated")]
        )
    ]
    orders = {
        tuple((m.access.stream, m.access.produced) for m in in_report_order(frozenset(marks[i:] + marks[:i])))
        for i in range(len(marks))
    }
    assert orders == {
        (("<current>", "written"), ("side", "written"), ("side", "allocated"), ("<current>", "by the caller"))
    }
