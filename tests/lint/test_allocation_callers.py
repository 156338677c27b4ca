"""An allocation stands for its stream's last launch before it (the block may still be in use by
that work). Made on the caller's stream before any launch there in the function, that launch is
the caller's: a caller that forks the using stream just before the call orders it, as it orders
the caller's own tensors (TransformerEngine's reload buffers, allocated on the main stream inside
the copy stream's block, after the only caller made the copy stream wait)."""

from __future__ import annotations

import textwrap

import pytest

from csan_lint.lint.engine import lint_source

RELOAD = """
import torch

class Offloader:
    def reload(self, group):
        main = torch.cuda.current_stream()
        {launch}
        with torch.cuda.stream(self.h2d):
            for cpu in self.saved:
                with torch.cuda.stream(main):
                    buffer = torch.empty_like(cpu, device="cuda")
                buffer.copy_(cpu, non_blocking=True)
                self.ready.append(buffer)

    def step(self):
        {fork}
        self.reload(self.count - 1)
"""

FORK = "self.h2d.wait_stream(torch.cuda.current_stream())"


def findings(launch: str, fork: str) -> list:
    return lint_source(textwrap.dedent(RELOAD.format(launch=launch, fork=fork)), "m.py")


def test_an_allocation_standing_for_the_callers_work_is_ordered_by_a_caller_that_forks() -> None:
    assert findings("pass", FORK) == []


@pytest.mark.parametrize(
    ("launch", "fork"),
    [
        ("pass", "pass"),  # no caller orders the copy stream
        ("self.scale.mul_(2)", FORK),  # work launched here after the fork may still use the block
    ],
)
def test_an_allocation_first_used_on_a_side_stream_with_no_ordering_is_flagged(launch: str, fork: str) -> None:
    (finding,) = findings(launch, fork)
    assert (finding.code, finding.line) == ("CSL101", 12)
    assert "'buffer' was allocated on the current stream and is first used on side stream 'self.h2d'" in (
        finding.message
    )


def test_the_callers_fork_holds_where_the_method_runs_after_another_methods_side_stream_work() -> None:
    """A public method is also interpreted from the state another method leaves on `self`."""
    producer = (
        "\n    def produce(self):\n        with torch.cuda.stream(self.h2d):\n"
        '            self.x = torch.ones(4, device="cuda")\n'
    )
    assert lint_source(textwrap.dedent(RELOAD.format(launch="pass", fork=FORK)) + producer, "m.py") == []


@pytest.mark.parametrize(
    "launch",
    [
        "assert group < self.count",  # compared with an attribute in a test
        "assert 0 <= group and not group == -1",
        "slot = 1 if group > 0 else 0",
        "slot = group % 2",
        "steps = list(range(group))",
        "n = group + 1; first = self.firsts[group]",  # an index, after another use
    ],
)
def test_a_parameter_used_as_a_number_launches_nothing_before_the_allocation(launch: str) -> None:
    """TransformerEngine's `bulk_reload_group(group_to_reload)` checks and splits its group number
    before allocating on the main stream: no launch there, and its only caller forks."""
    assert findings(launch, FORK) == []


@pytest.mark.parametrize(
    "launch",
    [
        "mask = group < self.count",  # outside a test: an elementwise comparison
        "slot = group % self.count",  # modulo of what may be a tensor
        "assert group < self.count; size = group.numel()",  # also used as a tensor
    ],
)
def test_a_parameter_used_as_a_tensor_reads_it_on_the_current_stream(launch: str) -> None:
    (finding,) = findings(launch, FORK)
    assert (finding.code, finding.line) == ("CSL101", 12)
