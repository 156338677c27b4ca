"""A module kept on `self` moved in place on a side stream without blocking
(`self.shard.to(device, non_blocking=True)` in `with torch.cuda.stream(self.side):`): its
parameters are the object's state, still being copied when the method returns, and whoever runs
the module next reads them on its own stream (an offloader's load and drop, in our own words)."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source

SHARD = """
import torch

class Shard:
    def __init__(self, module, device):
        self.shard = module
        self.device = device
        self.side = torch.cuda.Stream()

    def load(self, flag=True):
        {before}
        with torch.cuda.stream(self.side):
            {move}
        {after}

    def forward(self, x):
        return self.shard(x)

    def train(self, mode=True):
        self.shard.train(mode)
        return self
"""

MOVE_LINE = 13


def lint(move: str = "self.shard.to(self.device, non_blocking=True)", before: str = "pass", after: str = "pass"):
    return lint_source(textwrap.dedent(SHARD).format(before=before, move=move, after=after), "m.py")


def findings(**parts: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint(**parts))


def test_a_non_blocking_move_on_a_side_stream_left_pending_at_return_is_flagged() -> None:
    assert findings() == [("CSL102", MOVE_LINE)]
    assert findings(move="self.shard.cuda(non_blocking=flag)") == [("CSL102", MOVE_LINE)]


def test_the_message_says_the_modules_parameters_are_moved_on_the_side_stream() -> None:
    (finding,) = lint()
    assert "'self.shard' was moved in place (its parameters copied) on side stream 'self.side'" in finding.message
    assert "after 'Shard.load' returns" in finding.message


def test_a_join_after_the_move_is_not_flagged() -> None:
    assert findings(after="torch.cuda.current_stream().wait_stream(self.side)") == []


def test_an_event_recorded_after_the_move_and_kept_on_self_is_not_flagged() -> None:
    assert findings(after="self.loaded = self.side.record_event()") == []


def test_a_blocking_move_is_not_flagged() -> None:
    """A copy to or from the host without `non_blocking` returns once it is done."""
    assert findings(move="self.shard.to(self.device)") == []
    assert findings(move="self.shard.to(self.device, non_blocking=False)") == []


def test_a_move_on_the_current_stream_is_not_flagged() -> None:
    assert findings(move="pass", after="self.shard.to(self.device, non_blocking=True)") == []


def test_the_modules_own_methods_are_no_gpu_access() -> None:
    """`.train()`, `.parameters()`, `.requires_grad_()` set flags or hand out the parameters on
    the host: after the move only the return is reported, and the other methods not at all."""
    after = "self.shard.train(flag)\n        self.shard.requires_grad_(False)\n        list(self.shard.parameters())"
    assert findings(after=after) == [("CSL102", MOVE_LINE)]


def test_running_the_module_after_the_move_reads_its_parameters() -> None:
    assert ("CSL102", MOVE_LINE + 1) in findings(after="self.shard(torch.ones(2))")


def test_a_module_passed_in_and_moved_on_a_side_stream_made_here_says_it_was_moved() -> None:
    source = """
    import torch

    def load(shard, device):
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            shard.to(device, non_blocking=True)
    """
    (finding,) = lint_source(textwrap.dedent(source), "m.py")
    assert (finding.code, finding.line) == ("CSL102", 7)
    assert "'shard' was moved in place (its parameters copied) on side stream 'side'" in finding.message
