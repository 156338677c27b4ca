"""The real-world corpus's scoring (benchmarks/realworld/precision_recall.py): which findings
judge an excerpt, in excerpt form and in whole-file form."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks" / "realworld"))

from corpus import Excerpt, Version, cut_excerpt, excerpt_file_name
from precision_recall import CONTEXT_CONFIG, run_in_checkouts, run_linter, score, summarize


def _excerpt(label: str, *, fixed: bool = False) -> Excerpt:
    version = Version("a" * 40, "pkg/m.py", "C.f", (10, 20))
    return Excerpt(
        id=f"{label}-example",
        repo="owner/name",
        license="MIT",
        label=label,
        version=version,
        rules=("CSL101",) if label == "bug" else (),
        bug_lines=(15,) if label == "bug" else (),
        why="",
        tracker="https://example.invalid/1" if fixed else None,
        fixed=Version("b" * 40, "pkg/m.py", "C.f", (30, 45)) if fixed else None,
    )


def _finding(excerpt: Excerpt, line: int, *, fixed: bool = False, code: str = "CSL101") -> dict:
    return {"path": f"/cache/{excerpt_file_name(excerpt, fixed)}", "line": line, "code": code}


def _written(excerpts: list[Excerpt]) -> dict[str, Path]:
    names = [excerpt_file_name(e, fixed) for e in excerpts for fixed in ((False, True) if e.fixed else (False,))]
    return {name: Path(f"/cache/{name}") for name in names}


def _verdicts(excerpts: list[Excerpt], findings: list[dict], *, whole: bool) -> dict[tuple[str, str], str]:
    return {(s.excerpt, s.version): s.verdict for s in score(excerpts, findings, _written(excerpts), whole=whole)}


@pytest.mark.parametrize("whole", [False, True])
def test_a_bug_is_found_by_a_finding_of_its_rule_on_its_line(whole: bool) -> None:
    bug = _excerpt("bug")
    assert _verdicts([bug], [_finding(bug, 15)], whole=whole) == {(bug.id, "as-is"): "TP"}
    assert _verdicts([bug], [_finding(bug, 16)], whole=whole) == {(bug.id, "as-is"): "FN+FP"}
    assert _verdicts([bug], [_finding(bug, 15, code="CSL201")], whole=whole) == {(bug.id, "as-is"): "FN+FP"}


def test_whole_files_judge_only_the_findings_inside_the_excerpts_lines() -> None:
    bug, safe = _excerpt("bug", fixed=True), _excerpt("safe")
    findings = [_finding(bug, 15), _finding(bug, 5, fixed=True), _finding(safe, 21), _finding(safe, 9)]
    assert _verdicts([bug, safe], findings, whole=True) == {
        (bug.id, "as-is"): "TP",
        (bug.id, "fixed"): "TN",  # line 5 is outside the fix's lines 30-45
        (safe.id, "as-is"): "TN",
    }
    assert _verdicts([bug, safe], findings, whole=False) == {
        (bug.id, "as-is"): "TP",
        (bug.id, "fixed"): "FP",  # an excerpt is all the code there is: every finding counts
        (safe.id, "as-is"): "FP",
    }


def test_a_fix_is_judged_inside_its_own_lines() -> None:
    bug = _excerpt("bug", fixed=True)
    findings = [_finding(bug, 15), _finding(bug, 31, fixed=True)]
    scores = score([bug], findings, _written([bug]), whole=True)
    totals = summarize([bug], scores)
    assert (totals["tp"], totals["fp"], totals["known_bugs_both"]) == (1, 1, 0)
    assert totals["findings_on_fixed"] == 1


def test_known_bugs_that_need_another_module_are_counted_apart() -> None:
    alone, needing = (
        _excerpt("bug", fixed=True),
        replace(_excerpt("bug", fixed=True), id="ctx", context="pkg/caller.py"),
    )
    findings = [_finding(alone, 15), _finding(needing, 40, fixed=True)]
    totals = summarize([alone, needing], score([alone, needing], findings, _written([alone, needing]), whole=True))
    assert (totals["known_bugs_both"], totals["known_bugs_needing_context"]) == (1, 1)
    assert (totals["known_bugs_both_needing_context"], totals["findings_on_fixed"]) == (0, 1)


def test_a_file_that_opens_with_a_byte_order_mark_is_cut_at_its_own_lines() -> None:
    text = "\ufeffimport torch\n\n\ndef f(x):\n    return x\n\n\ndef g():\n    pass\n"
    cut = cut_excerpt(text, Version("a" * 40, "m.py", "f", (4, 5)))
    assert cut.splitlines()[3:5] == ["def f(x):", "    return x"]
    assert "def g" not in cut


def test_assumption_flips_score_each_further_manifest_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`assumptions.py --manifest`: each spent held-out set is scored with its own totals."""
    import assumptions

    commands: list[list[str]] = []

    def run(command: list[str], **_: object) -> None:
        commands.append(command)
        manifest = command[command.index("--manifest") + 1] if "--manifest" in command else "corpus"
        totals = {"tp": len(manifest), "fp": 0, "fn": 1, "known_bugs_both": 2, "findings_on_fixed": 3}
        Path(command[command.index("--json") + 1]).write_text(json.dumps({"totals": totals}))

    monkeypatch.setattr(assumptions.subprocess, "run", run)
    found = assumptions.scores("csan-lint", [Path("sets/heldout-a.toml")], tmp_path, "base")
    assert set(found) == {"corpus", "heldout-a"}
    assert found["heldout-a"]["tp"] == len("sets/heldout-a.toml") and found["corpus"]["tp"] == len("corpus")
    assert all("--whole-files" in command for command in commands)


OPS = """\
from contextlib import nullcontext

import torch


def process(env_state, inputs, fn):
    ctx = torch.cuda.stream(env_state.stream) if env_state.stream else nullcontext()
    with ctx:
        loss = fn(inputs)
        return loss.detach()
"""
TRAIN = """\
from contextlib import nullcontext

import torch

from .ops import process


def run(env_state, inputs, fn):
    loss = process(env_state, inputs, fn)
    ctx = torch.cuda.stream(env_state.stream) if env_state.stream else nullcontext()
    with ctx:
        env_state.loss_accum.add_(loss)
"""


def test_repo_context_lints_each_checkout_as_its_project(tmp_path: Path) -> None:
    """A module's result written on the argument's stream is known at the call only where the
    module beside it is read: named from another working tree, the checkout is no project."""
    linter = str(Path(sys.executable).parent / "csan-lint")
    train = tmp_path / "owner+name@abc" / "pkg" / "train.py"
    train.parent.mkdir(parents=True)
    (train.parent / "__init__.py").write_text("")
    (train.parent / "ops.py").write_text(OPS)
    train.write_text(TRAIN)
    alone = run_linter(linter, [train])
    assert {finding["code"] for finding in alone} == {"CSL101", "CSL201"}
    assert run_in_checkouts(linter, [train], [tmp_path]) == []
    assert (tmp_path / "owner+name@abc" / CONTEXT_CONFIG).is_file()
