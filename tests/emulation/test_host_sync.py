"""Host-syncing ops: one list (runtime/op_plans.py) for the emulated device and the
sanitizer, so a test syncs the same way on a GPU and on the emulation."""

from __future__ import annotations

import pytest
import torch

from csan_lint.runtime import kinds, sanitize
from csan_lint.runtime.op_plans import HOST_SYNC, plan_of

aten = torch.ops.aten


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.bincount(x),
        lambda x: torch.repeat_interleave(x),
        lambda x: x[x > 0],
        lambda x: torch.nonzero(x),
        lambda x: x.sum().item(),
    ],
    ids=["bincount", "repeat_interleave", "mask_index", "nonzero", "item"],
)
def test_host_syncing_ops_fire_a_sync_of_the_current_stream(trace, call):
    x = torch.tensor([1, 0, 2], device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        before = len(trace)
        call(x)
    assert ("stream_synchronized", side.cuda_stream) in trace[before:]


@pytest.mark.parametrize(
    "call",
    [
        lambda x, index: torch.repeat_interleave(x, x, output_size=3),
        lambda x, index: x[index],
        lambda x, index: x + 1,
    ],
    ids=["repeat_interleave_sized", "integer_index", "add"],
)
def test_ops_that_know_their_result_size_fire_no_sync(trace, call):
    x = torch.tensor([1, 0, 2], device="cuda")
    index = torch.tensor([0, 2], device="cuda")
    before = len(trace)
    call(x, index)
    assert "stream_synchronized" not in [entry[0] for entry in trace[before:]]


def test_a_host_syncing_op_in_a_graph_capture_fails_as_on_cuda(device):
    x = torch.tensor([1, 0, 2], device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with torch.cuda.graph(graph):
            torch.bincount(x)


def test_the_plan_tells_mask_indexing_from_integer_indexing():
    plan = plan_of(aten.index.Tensor)
    values = torch.arange(3)
    assert plan.kind == HOST_SYNC
    assert plan.syncs_host((values, [values > 0]), {})
    assert not plan.syncs_host((values, [None, torch.tensor([1])]), {})
    sized = plan_of(aten.repeat_interleave.Tensor)
    assert sized.syncs_host((values,), {}) and not sized.syncs_host((values,), {"output_size": 3})


@pytest.mark.parametrize(
    "late_write, expected",
    [(False, []), (True, [kinds.WRITE_AFTER_WRITE])],
    ids=["before_the_sync", "after_the_sync"],
)
def test_a_host_syncing_op_orders_the_work_of_its_stream_before_it(late_write, expected):
    with sanitize(device="emulated") as sanitizer:
        x = torch.tensor([1, 0, 2], device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
            counts = torch.bincount(y)  # the host waits for `side`: y is written
            z = x + 1  # after the sync: nothing orders it before the default stream
        (z if late_write else y).add_(1)
        del counts
    assert [e.kind for e in sanitizer.errors] == expected
