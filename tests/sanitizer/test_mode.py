"""The dispatch mode's translation of ops into tracker events, on plain CPU tensors standing for
device tensors (no emulation): a recording tracker shows exactly what each op became."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import torch

from csan_lint.runtime.events import Access
from csan_lint.runtime.mode import SanitizerMode, byte_extent
from csan_lint.runtime.stacks import innermost_user_frame

STREAM = 7


class Recorder:
    """A tracker that records every call as (method, args)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, args))

    def launches(self) -> list[tuple[str, list[Access]]]:
        return [(args[1], args[2]) for name, args in self.calls if name == "kernel_launched"]


def make_mode(tracker: Any, *, host: set[int] = frozenset(), pinned: bool = False, errors: list | None = None):
    """A mode where every tensor is a device tensor except those whose storage is in `host`."""

    def is_device(t: torch.Tensor) -> bool:
        return t.untyped_storage().data_ptr() not in host

    return SanitizerMode(
        tracker,
        is_device=is_device,
        is_pinned=lambda t: pinned,
        current_stream=lambda: STREAM,
        on_internal_error=(errors.append if errors is not None else pytest.fail),
    )


def base(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_in_place_op_writes_its_argument_and_returns_it():
    x = torch.zeros(4)
    rec = Recorder()
    with make_mode(rec):
        x.add_(1)
    assert rec.launches() == [("aten::add_.Tensor", [Access(base(x), 16, True, "self", True)])]


def test_out_argument_aliasing_an_input_is_one_written_access():
    x = torch.ones(3)
    rec = Recorder()
    with make_mode(rec):
        torch.mul(x, 5, out=x)
    assert rec.launches() == [("aten::mul.out", [Access(base(x), 12, True, "self, out", True)])]


def test_fresh_output_is_written_inputs_are_read():
    a, b = torch.ones(2), torch.ones(2)
    rec = Recorder()
    with make_mode(rec):
        c = torch.add(a, b)
    ((op, accesses),) = rec.launches()
    assert op == "aten::add.Tensor"
    assert accesses == [
        Access(base(a), 8, False, "self"),
        Access(base(b), 8, False, "other"),
        Access(base(c), 8, True, "output", True),
    ]


def test_same_tensor_in_two_arguments_is_one_access_naming_both():
    a = torch.ones(2)
    rec = Recorder()
    with make_mode(rec):
        torch.add(a, a)
    accesses = rec.launches()[0][1]
    assert accesses[0] == Access(base(a), 8, False, "self, other")


def test_views_are_not_kernels_and_a_view_access_covers_its_bytes_only():
    x = torch.zeros(3, 4)
    rec = Recorder()
    with make_mode(rec):
        tail = x[1:]
        tail.add_(1)
    # x[1:] is aten::slice: metadata only, no launch; add_ touches rows 1-2: bytes 16..48.
    assert rec.launches() == [("aten::add_.Tensor", [Access(base(x) + 16, 32, True, "self", True)])]


def test_strided_view_extent_runs_from_lowest_to_highest_byte():
    x = torch.zeros(3, 4)
    column = x.t()[1]  # elements 1, 5, 9
    assert byte_extent(column) == (base(x) + 4, 36)
    assert byte_extent(x[:, :0])[1] == 0


def test_factory_like_ops_do_not_read_their_input():
    x = torch.ones(5)
    rec = Recorder()
    with make_mode(rec):
        y = torch.zeros_like(x)
    assert rec.launches() == [("aten::zeros_like", [Access(base(y), 20, True, "output", True)])]


def test_empty_factories_launch_nothing():
    """No kernel fills them: the allocation (the block's earlier use) stands for them."""
    x = torch.ones(5)
    rec = Recorder()
    with make_mode(rec):
        torch.empty_like(x), x.new_empty(3), torch.empty(2, 3), torch.empty_strided((2,), (1,))
    assert rec.launches() == []


def test_strided_views_carry_their_layout_dense_ones_do_not():
    x = torch.zeros(4, 6)
    rec = Recorder()
    with make_mode(rec):
        x[:, :3].add_(1)
        x.t().add_(1)
        x[0::2].add_(1)
    (_, [left]), (_, [transposed]), (_, [even_rows]) = rec.launches()
    assert left == Access(base(x), (3 * 6 + 3) * 4, True, "self", True, (4, (4, 3), (6, 1)))
    assert transposed == Access(base(x), 96, True, "self", True)  # dense: its extent is exact
    assert even_rows.layout == (4, (2, 6), (12, 1))


def test_tensor_lists_are_read_element_by_element():
    a, b = torch.ones(2), torch.ones(3)
    rec = Recorder()
    with make_mode(rec):
        torch.cat([a, b])
    reads = [acc for acc in rec.launches()[0][1] if not acc.is_write]
    assert reads == [Access(base(a), 8, False, "tensors"), Access(base(b), 12, False, "tensors")]


def test_fresh_tensor_list_results_are_written():
    a, b = torch.ones(2), torch.ones(3)
    rec = Recorder()
    with make_mode(rec):
        c, d = torch._foreach_add([a, b], 1.0)
    ((op, accesses),) = rec.launches()
    assert op == "aten::_foreach_add.Scalar"
    assert accesses == [
        Access(base(a), 8, False, "self"),
        Access(base(b), 12, False, "self"),
        Access(base(c), 8, True, "output", True),
        Access(base(d), 12, True, "output", True),
    ]


def test_number_results_and_scalar_arguments_are_not_memory():
    x = torch.ones(3)
    rec = Recorder()
    with make_mode(rec):
        x.add_(2.5)
        x[0].item()
    launches = rec.launches()
    assert [len(accesses) for _, accesses in launches] == [1, 1]


def test_item_syncs_the_host_with_the_current_stream_after_its_kernel():
    x = torch.ones(1)
    rec = Recorder()
    with make_mode(rec):
        x.item()
    assert [name for name, _ in rec.calls] == ["kernel_launched", "stream_synchronized"]
    assert rec.calls[1][1] == (STREAM,)


def test_empty_tensors_touch_nothing():
    x = torch.ones(0)
    rec = Recorder()
    with make_mode(rec):
        x.add_(1)
    assert rec.calls == []


def test_host_only_ops_are_ignored():
    x = torch.ones(3)
    rec = Recorder()
    with make_mode(rec, host={base(x)}):
        x.add_(1)
    assert rec.calls == []


def test_pending_allocation_gets_its_size_when_first_seen():
    x = torch.ones(4)
    rec = Recorder()
    mode = make_mode(rec)
    mode.pending[base(x)] = (3, "alloc-stack")
    with mode:
        x[2:].add_(1)  # a view at an offset still names its block's base
    assert rec.calls[0] == ("allocated", (base(x), 16, 3))
    assert mode.pending == {}


def test_non_blocking_copy_to_pinned_host_leaves_a_pending_host_side():
    dev = torch.ones(4)
    host = torch.zeros(4)
    rec = Recorder()
    with make_mode(rec, host={base(host)}, pinned=True):
        host.copy_(dev, non_blocking=True)
        host.add_(1)  # a CPU op on the pinned block: the host writes it
    ((op, accesses),) = rec.launches()
    assert op == "aten::copy_"
    assert Access(base(host), 16, True, "self", True) in accesses
    assert Access(base(dev), 16, False, "src") in accesses
    assert "stream_synchronized" not in [name for name, _ in rec.calls]
    assert rec.calls[-1][0] == "host_accessed"
    assert rec.calls[-1][1][:4] == (base(host), 16, True, "aten::add_.Tensor")


def test_a_device_block_at_a_pinned_address_is_never_freed_as_host_memory():
    dev = torch.ones(4)
    buffer = torch.zeros(4)
    host = {base(buffer)}
    rec = Recorder()
    mode = make_mode(rec, host=host, pinned=True)
    with mode:
        buffer.copy_(dev, non_blocking=True)
        assert base(buffer) in mode.host_blocks
        assert [name for name, _ in rec.calls] == ["allocated", "kernel_launched"]  # the host block, the copy
        # On the emulated device one address space holds both: the address becomes a device block's.
        host.clear()
        mode.pending[base(buffer)] = (STREAM, None)
        buffer.add_(1)
        assert mode.host_blocks == {}
        del buffer  # the storage dies as a device block's: not freed as host memory
    assert [name for name, _ in rec.calls][-2:] == ["allocated", "kernel_launched"]
    assert "freed" not in [name for name, _ in rec.calls]


def test_a_pinned_block_is_freed_when_it_dies_and_forgotten_when_the_mode_ends():
    dev = torch.ones(4)
    buffers = [torch.zeros(4), torch.zeros(8)]
    host = {base(b) for b in buffers}
    rec = Recorder()
    mode = make_mode(rec, host=host, pinned=True)
    with mode:
        for buffer in buffers:
            buffer[:4].copy_(dev, non_blocking=True)
        dead = base(buffers.pop(0))
        assert ("freed", (dead,)) in rec.calls and len(mode.host_blocks) == 1
    assert mode.host_blocks == {}
    del buffers[0]
    assert [args for name, args in rec.calls if name == "freed"] == [(dead,)]


def test_blocking_copy_to_host_syncs_and_does_not_track_host_memory():
    dev = torch.ones(4)
    host = torch.zeros(4)
    rec = Recorder()
    mode = make_mode(rec, host={base(host)}, pinned=True)
    with mode:
        host.copy_(dev)
        host.add_(1)
    assert [name for name, _ in rec.calls] == ["kernel_launched", "stream_synchronized"]
    assert rec.launches()[0][1] == [Access(base(dev), 16, False, "src")]
    assert mode.host_blocks == {}


def test_internal_error_is_contained_and_stops_checking():
    class Broken(Recorder):
        def kernel_launched(self, *args: Any, **kwargs: Any) -> None:
            raise KeyError("boom")

    errors: list[BaseException] = []
    x = torch.ones(2)
    mode = make_mode(Broken(), errors=errors)
    with mode:
        y = x + 1
        z = y + 1
    assert torch.equal(z, torch.full((2,), 3.0))
    assert len(errors) == 1 and isinstance(errors[0], KeyError)
    assert mode.checking is False


def test_mode_skips_torch_disable_dynamo_wrapper():
    assert SanitizerMode._should_skip_dynamo() is False
    assert "__torch_dispatch__" in SanitizerMode.__dict__
    assert not hasattr(SanitizerMode.__dict__["__torch_dispatch__"], "__wrapped__")


def test_an_ops_allocation_and_launch_share_one_stack_walk(monkeypatch):
    """The allocator's callback during an op asks for the op's stack: one walk serves it and
    the launch (walks are most of an op's cost), and it names the line that called the op."""
    import csan_lint.runtime.mode as mode_module

    walks: list[object] = []
    real = mode_module.capture_stack

    def counting(skip: int = 0, stop: Any = (), start: Any = None) -> Any:
        walks.append(skip)
        return real(skip + 1, stop, start)

    monkeypatch.setattr(mode_module, "capture_stack", counting)
    rec = Recorder()
    mode = make_mode(rec)
    allocation_stacks = []

    def allocate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # What the allocator's callback does, from inside the op.
        allocation_stacks.append(mode.stack_of_running_op())
        allocation_stacks.append(mode.stack_of_running_op())  # a second block of the same op
        return torch.add(x, y)

    a, b = torch.ones(4), torch.ones(4)
    with torch.library._scoped_library("csan_test", "FRAGMENT") as lib:
        lib.define("allocating_add(Tensor x, Tensor y) -> Tensor")
        lib.impl("allocating_add", allocate, "CompositeExplicitAutograd")
        with mode:
            call_line = sys._getframe().f_lineno + 1
            torch.ops.csan_test.allocating_add(a, b)
    assert len(walks) == 1
    assert len(rec.launches()) == 1
    launch_stack = next(args[3] for name, args in rec.calls if name == "kernel_launched")
    assert allocation_stacks[0] is allocation_stacks[1] is launch_stack
    assert innermost_user_frame(launch_stack).lineno == call_line


def test_outside_an_op_or_in_another_thread_a_callback_walks_its_own_stack():
    mode = make_mode(Recorder())
    outside = mode.stack_of_running_op()
    assert innermost_user_frame(outside).lineno == sys._getframe().f_lineno - 1
    mode._op_stack = (threading.get_ident() + 1, "another thread's op stack")
    assert mode.stack_of_running_op() != "another thread's op stack"
