"""The items of a list the caller passed in (a bucket of its gradients), used on a side stream
and still pending there when the function returns: the caller drops the list, and with it the
tensors, while that work runs (DeepSpeed's `allreduce_and_copy` before and after its fix, in our
own words)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

BUCKET = """
import torch

class Reducer:
    def copy_back(self, bucket):
        if self.overlap:
            stream = self.side
        else:
            stream = torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            reduced = self.reduce(bucket)
            for {loop}:
                {use}
                {after_copy}
        {after_block}
"""

ZIPPED = "buf, synced in zip(bucket, self.unflatten(reduced, bucket))"


def source(
    loop: str = ZIPPED, use: str = "buf.copy_(synced)", after_copy: str = "pass", after_block: str = "pass"
) -> str:
    return textwrap.dedent(BUCKET.format(loop=loop, use=use, after_copy=after_copy, after_block=after_block))


def findings(**parts: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in lint_source(source(**parts), "m.py"))


@pytest.mark.parametrize(
    ("loop", "use"),
    [
        (ZIPPED, "buf.copy_(synced)"),
        ("i, buf in enumerate(bucket)", "buf.copy_(reduced[i])"),
        ("buf in bucket", "buf.div_(2)"),
    ],
)
def test_an_item_of_the_callers_list_written_on_a_side_stream_and_left_pending_is_flagged(loop: str, use: str) -> None:
    assert findings(loop=loop, use=use) == [("CSL201", 13)]


def test_an_item_only_read_there_is_left_to_the_caller() -> None:
    """An offload reading the caller's gradients: the caller usually keeps them (as it keeps a
    parameter only read, `Caller.kept`), so a pending read alone is no evidence of a drop."""
    assert findings(loop="buf in bucket", use="self.total.add_(buf)") == []


def test_the_message_says_the_caller_may_drop_it_and_names_the_side_stream() -> None:
    (finding,) = lint_source(source(), "m.py")
    assert "'buf'" in finding.message
    assert "side stream 'self.side'" in finding.message
    assert "caller" in finding.message
    assert finding.fix is not None and "buf.record_stream(self.side)" in finding.fix


@pytest.mark.parametrize(
    ("after_copy", "after_block"),
    [
        ("if self.overlap:\n                    buf.record_stream(stream)", "pass"),  # the fix, on one path
        ("pass", "torch.cuda.current_stream().wait_stream(stream)"),  # joined before returning
    ],
)
def test_a_record_stream_or_a_join_before_returning_covers_the_items(after_copy: str, after_block: str) -> None:
    assert findings(after_copy=after_copy, after_block=after_block) == []


def test_items_of_the_objects_own_buffers_outlive_the_call() -> None:
    """`self.buffers` keeps its tensors: nothing is dropped when the function returns."""
    assert findings(loop="buf, synced in zip(self.buffers, self.unflatten(reduced, bucket))") == []


@pytest.mark.parametrize(
    ("join", "flagged"),
    [
        ("pass", True),
        ("torch.cuda.current_stream().wait_stream(self.side)", False),
        ("torch.cuda.synchronize()", False),
    ],
)
def test_a_function_with_callers_in_the_module_is_flagged_unless_every_caller_joins(join: str, flagged: bool) -> None:
    callers = (
        "\n    def step(self, grads):\n        self.copy_back(grads)\n"
        "        torch.cuda.current_stream().wait_stream(self.side)\n"
        f"\n    def step_again(self, grads):\n        self.copy_back(grads)\n        {join}\n"
    )
    assert bool(lint_source(source() + callers, "m.py")) == flagged


def test_a_sync_commented_out_in_a_caller_joins_nothing() -> None:
    callers = "\n    def step(self, grads):\n        self.copy_back(grads)\n        # torch.cuda.synchronize()\n"
    callers += "\n    def again(self, grads):\n        self.copy_back(grads)\n        torch.cuda.synchronize()\n"
    assert lint_source(source() + callers, "m.py") != []
