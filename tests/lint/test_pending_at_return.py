"""Side-stream work on the caller's tensors still pending when a function returns: a stream
chosen by if/else, pending reads (the caller's next overwrite), and the join made by the next
call at its entry (DeepSpeed's `average_tensor` before and after its fix, in our own words)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source


def findings(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(textwrap.dedent(source), "m.py"))


def messages(source: str) -> list[str]:
    return [f.message for f in lint_source(textwrap.dedent(source), "m.py")]


CHOSEN = """
import torch

class Reducer:
    def reduce(self, bucket):
        if self.overlap:
            stream = self.side
            stream.wait_stream(torch.cuda.current_stream())
            {entry_join}
        else:
            stream = torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            {use}
"""


@pytest.mark.parametrize(
    ("use", "code"),
    [("bucket.div_(2)", "CSL102"), ("self.total.add_(bucket.sum())\n            bucket.narrow(0, 0, 1)", "CSL103")],
)
def test_work_on_a_stream_chosen_by_if_else_pending_at_return_is_flagged(use: str, code: str) -> None:
    assert code in {found for found, _ in findings(CHOSEN.format(entry_join="pass", use=use))}


def test_the_message_and_help_name_the_side_stream_not_the_choice() -> None:
    (finding,) = lint_source(textwrap.dedent(CHOSEN.format(entry_join="pass", use="bucket.div_(2)")), "m.py")
    assert "side stream 'self.side'" in finding.message
    assert finding.fix == "join before the use: `torch.cuda.current_stream().wait_stream(self.side)`"


def test_the_other_branch_binding_the_current_stream_needs_no_wait_of_its_own() -> None:
    """The wait made under `if` orders the side stream wherever it is used: no CSL101 for the read."""
    assert "CSL101" not in {code for code, _ in findings(CHOSEN.format(entry_join="pass", use="bucket.div_(2)"))}


def test_a_join_at_entry_leaves_the_pending_work_to_the_next_call() -> None:
    joined = CHOSEN.format(entry_join="torch.cuda.current_stream().wait_stream(stream)", use="bucket.div_(2)")
    assert findings(joined) == []


def test_a_join_after_the_work_on_the_side_stream_is_an_ordinary_join() -> None:
    source = CHOSEN.format(entry_join="pass", use="bucket.div_(2)") + (
        "        torch.cuda.current_stream().wait_stream(stream)\n"
    )
    assert findings(source) == []


PENDING_READ = """
import torch

class Copier:
    def copy(self, param: torch.Tensor, log=None, flag=True):
        self.s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.s):
            self.buf.copy_(param)
            self.report(log, flag)
            {after}
"""


def test_a_pending_read_of_a_tensor_parameter_is_the_callers_next_overwrite() -> None:
    assert messages(PENDING_READ.format(after="pass")) == [
        "'param' is read on side stream 'self.s' and then overwritten on the caller's stream after "
        "'Copier.copy' returns before the caller's stream waits for that read"
    ]


def test_a_parameter_whose_lifetime_is_handed_off_is_not_overwritten() -> None:
    assert findings(PENDING_READ.format(after="param.record_stream(self.s)")) == []


def test_a_parameter_given_memory_the_side_stream_still_writes_is_flagged_not_its_old_read() -> None:
    """`param.data = self.buf`: the caller no longer overwrites the memory read, but it now
    reads `self.buf`'s, which the copy on the side stream is still writing."""
    assert findings(PENDING_READ.format(after="param.data = self.buf")) == [("CSL102", 8)]


def test_values_passed_on_with_no_sign_of_a_tensor_are_not_reported() -> None:
    """`log=None`, `flag=True`, a list only zipped: not the caller's tensors."""
    source = """
    import torch

    class Copier:
        def copy(self, bucket, log=None):
            with torch.cuda.stream(self.s):
                self.reduce(bucket, log)
                for buf in zip(bucket, self.flat):
                    pass
    """
    assert findings(source) == []


def test_a_local_bound_on_one_path_only_keeps_its_stream() -> None:
    """`stream3 = ex.stream3` under `if`: the other path cannot use the name, so the block on
    it is on `ex.stream3`, not a stream of unknown identity."""
    source = """
    import torch

    def f(ex, x: torch.Tensor, big):
        if big:
            stream3 = ex.stream3
        y = torch.empty_like(x)
        with torch.cuda.stream(stream3):
            y.copy_(x)
        return y
    """
    assert ("CSL101", 9) in findings(source)
