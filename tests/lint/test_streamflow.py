"""The stream-flow interpreter on small programs: which accesses it finds unordered, and why."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis.tokens import CURRENT
from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Span
from csan_lint.lint.ordering import HazardKind
from csan_lint.lint.streamflow import ModuleFlow, analyse

RAW, WAW, WAR, FREE = (
    HazardKind.READ_AFTER_WRITE,
    HazardKind.WRITE_AFTER_WRITE,
    HazardKind.WRITE_AFTER_READ,
    HazardKind.FREE_IN_USE,
)


def _flow(source: str) -> ModuleFlow:
    source = textwrap.dedent(source)
    return analyse(cst.parse_module(source), "m.py")


def hazards(source: str, *kinds: HazardKind) -> set[tuple[str, str, int, str, str]]:
    """(kind, tensor, line, stream of the access, other stream) for each hazard."""
    flow = _flow(source)
    return {
        (hazard.kind.name, hazard.tensor, flow.line(hazard.access.node), hazard.access.stream, hazard.other)
        for hazard in flow.hazards
        if not kinds or hazard.kind in kinds
    }


def raw(tensor: str, line: int, stream: str, other: str) -> tuple[str, str, int, str, str]:
    return ("READ_AFTER_WRITE", tensor, line, stream, other)


FORK = """
import torch

def f(x, s):
    y = x * 2
    {before}
    with torch.cuda.stream(s):
        z = y + 1
"""


@pytest.mark.parametrize(
    "before",
    [
        "s.wait_stream(torch.cuda.current_stream())",
        "torch.cuda.synchronize()",
        "torch.cuda.current_stream().synchronize()",
        "e = torch.cuda.current_stream().record_event(); s.wait_event(e)",
        "e = torch.cuda.Event(); e.record(); e.wait(s)",
        "e = torch.cuda.Event(); e.record(torch.cuda.current_stream()); s.wait_event(e)",
        "e = torch.cuda.Event(); torch.cuda.current_stream().record_event(e); e.synchronize()",
        "n = y.sum().item()",
        "n = y.tolist()",
        "h = y.cpu()",
    ],
)
def test_orderings_before_the_block(before: str) -> None:
    assert hazards(FORK.format(before=before), RAW) == set()


def test_a_wait_on_the_default_stream_does_not_order_the_callers_stream() -> None:
    """A function may be called with a side stream current: `default_stream()` is then another
    stream, and waiting on it leaves the caller's writes unordered (DeepSpeed #7898)."""
    source = FORK.format(before="s.wait_stream(torch.cuda.default_stream())")
    assert hazards(source, RAW) == {raw("y", 8, "s", CURRENT)}


def test_in_a_script_the_default_stream_is_the_current_one() -> None:
    source = """
    import torch

    x = torch.ones(4, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.default_stream())
    with torch.cuda.stream(s):
        y = x * 2
    """
    assert hazards(source, RAW) == set()


def test_work_on_the_default_stream_and_on_the_callers_never_conflicts_by_itself() -> None:
    source = """
    import torch

    def f(x):
        y = x * 2
        with torch.cuda.stream(torch.cuda.default_stream()):
            z = y + 1
        return z
    """
    assert hazards(source) == set()


@pytest.mark.parametrize(
    "before",
    [
        "pass",
        "torch.cuda.current_stream().wait_stream(s)",
        "e = torch.cuda.Event(); s.wait_event(e)",
        "e = torch.cuda.Event(); e.record(); e = torch.cuda.Event(); s.wait_event(e)",
        "e = torch.cuda.Event(); e.record(s); s.wait_event(e)",
        "s.synchronize()",
        "other.wait_stream(torch.cuda.current_stream())",
    ],
)
def test_not_orderings_before_the_block(before: str) -> None:
    assert hazards(FORK.format(before=before), RAW) == {raw("y", 8, "s", CURRENT)}


def test_event_captures_the_work_before_its_record_only() -> None:
    source = """
    import torch

    def f(x, s):
        e = torch.cuda.Event()
        e.record()
        y = x * 2
        s.wait_event(e)
        with torch.cuda.stream(s):
            z = y + 1
    """
    assert hazards(source, RAW) == {raw("y", 10, "s", CURRENT)}


def test_re_recording_an_event_moves_its_point() -> None:
    source = """
    import torch

    def f(x, s):
        e = torch.cuda.Event()
        e.record()
        y = x * 2
        e.record()
        s.wait_event(e)
        with torch.cuda.stream(s):
            z = y + 1
    """
    assert hazards(source, RAW) == set()


def test_waits_are_transitive() -> None:
    source = """
    import torch

    def f(x, a, b):
        y = x * 2
        a.wait_stream(torch.cuda.current_stream())
        b.wait_stream(a)
        with torch.cuda.stream(b):
            z = y + 1
    """
    assert hazards(source, RAW) == set()


def test_host_read_syncs_only_the_current_stream() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
        n = x.sum().item()
        return y + 1
    """
    assert hazards(source, RAW) == {raw("y", 8, CURRENT, "s")}


def test_host_read_inside_the_block_syncs_the_side_stream() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
            n = y.sum().item()
        return y
    """
    assert hazards(source, RAW) == set()


def test_nested_blocks_and_several_items() -> None:
    source = """
    import torch

    def f(x, a, b):
        y = x * 2
        with torch.cuda.stream(a):
            u = y + 1
            with torch.cuda.stream(b):
                v = y + 2
            w = y + 3
        with torch.no_grad(), torch.cuda.stream(a), torch.cuda.stream(b):
            t = y + 4
    """
    flow = _flow(source)
    found = {
        (flow.line(h.access.node), h.access.stream, flow.location(h)["span"]) for h in flow.hazards if h.kind is RAW
    }
    assert found == {
        (7, "a", Span(6, 10)),
        (9, "b", Span(8, 9)),
        (10, "a", Span(6, 10)),
        (12, "b", Span(11, 12)),
    }


def test_stream_context_object_and_current_stream_inside_a_block() -> None:
    source = """
    import torch

    def f(x, s):
        ctx = torch.cuda.StreamContext(s)
        main = torch.cuda.current_stream()
        with ctx:
            y = x * 2
            inner = torch.cuda.current_stream()
        main.wait_stream(inner)
        return y
    """
    assert hazards(source) == set()


def test_stream_none_and_unresolved_stream_functions_are_not_blocks() -> None:
    source = """
    import torch
    from mylib import stream

    def f(x, s):
        y = x * 2
        with torch.cuda.stream(None):
            z = y + 1
        with stream(s):
            w = y + 1
        return z, w
    """
    assert hazards(source) == set()


def test_set_stream_changes_the_current_stream() -> None:
    source = """
    import torch

    def f(x, s):
        y = x * 2
        torch.cuda.set_stream(s)
        return y + 1
    """
    assert hazards(source, RAW) == {raw("y", 7, "s", CURRENT)}


def test_attributes_name_streams_and_tensors() -> None:
    source = """
    import torch

    class Prefetcher:
        def load(self, batch):
            with torch.cuda.stream(self.copy_stream):
                self.next = batch.cuda(non_blocking=True)
            torch.cuda.current_stream().wait_stream(self.copy_stream)
            return self.next

        def bad(self, batch):
            with torch.cuda.stream(self.copy_stream):
                self.next = batch.cuda(non_blocking=True)
            return self.next.float()
    """
    flow = _flow(source)
    assert hazards(source, RAW) == {raw("self.next", 14, CURRENT, "self.copy_stream")}
    assert {hazard.function for hazard in flow.hazards if hazard.kind is RAW} == {"Prefetcher.bad"}


def test_branches_join_precisely() -> None:
    source = """
    import torch

    def f(x, s, flag):
        with torch.cuda.stream(s):
            y = x * 2
        if flag:
            torch.cuda.current_stream().wait_stream(s)
        else:
            torch.cuda.synchronize()
        a = y + 1
        if flag:
            b = torch.relu(x)
        else:
            with torch.cuda.stream(s):
                b = torch.relu(x)
        return b + a
    """
    assert hazards(source, RAW) == {raw("b", 17, CURRENT, "s")}


def test_loop_carries_a_side_stream_result_to_the_next_iteration() -> None:
    source = """
    import torch

    def f(xs, s):
        acc = torch.zeros(4, device="cuda")
        for x in xs:
            acc.add_(x)
            with torch.cuda.stream(s):
                acc.mul_(2)
        torch.cuda.current_stream().wait_stream(s)
        return acc
    """
    assert hazards(source, WAW) == {
        ("WRITE_AFTER_WRITE", "acc", 7, CURRENT, "s"),
        ("WRITE_AFTER_WRITE", "acc", 9, "s", CURRENT),
    }
    assert hazards(source, RAW) == set()


def test_wait_at_the_top_of_each_iteration_orders_the_carried_value() -> None:
    source = """
    import torch

    def f(xs, s):
        acc = torch.zeros(4, device="cuda")
        for x in xs:
            torch.cuda.current_stream().wait_stream(s)
            acc.add_(x)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                acc.mul_(2)
        torch.cuda.current_stream().wait_stream(s)
        return acc
    """
    assert hazards(source) == set()


def test_while_break_and_continue_paths_reach_the_right_places() -> None:
    source = """
    import torch

    def f(x, s, n):
        while n:
            with torch.cuda.stream(s):
                y = x * 2
            if n > 3:
                break
            torch.cuda.current_stream().wait_stream(s)
            if n > 2:
                continue
            n -= 1
        return y + 1
    """
    assert hazards(source, RAW) == {raw("y", 14, CURRENT, "s")}


def test_try_handlers_start_from_any_point_of_the_body() -> None:
    source = """
    import torch

    def f(x, s):
        try:
            with torch.cuda.stream(s):
                y = x * 2
            torch.cuda.current_stream().wait_stream(s)
        except RuntimeError:
            return y + 1
        finally:
            pass
        return y
    """
    assert hazards(source, RAW) == {raw("y", 10, CURRENT, "s")}


def test_views_share_the_state_of_their_base() -> None:
    source = """
    import torch

    def f(x, s):
        y = torch.relu(x)
        head = y[0]
        flat = y.view(-1)
        with torch.cuda.stream(s):
            a = head + 1
            b = flat + 1
        torch.cuda.current_stream().wait_stream(s)
        return a, b
    """
    assert hazards(source, RAW) == {raw("head", 9, "s", CURRENT), raw("flat", 10, "s", CURRENT)}


def test_views_of_parameters_are_ready() -> None:
    source = """
    import torch

    def f(x, s):
        head = x[0]
        with torch.cuda.stream(s):
            a = head + 1
        torch.cuda.current_stream().wait_stream(s)
        return a
    """
    assert hazards(source) == set()


def test_host_values_are_not_tensors() -> None:
    source = """
    import torch

    def f(x, s, count: int):
        n = x.size(0)
        dims = len(x.shape)
        twice = count * 2
        with torch.cuda.stream(s):
            y = torch.empty(n, dims, twice, device="cuda")
        torch.cuda.current_stream().wait_stream(s)
        return y
    """
    assert hazards(source, RAW, WAW, WAR) == set()


@pytest.mark.parametrize(
    "escape",
    [
        "return x",
        "self.keep = x",
        "cache.append(x)",
        "kept = x",
        "kept = [x, 1]",
        "kept = x.view(-1)",
    ],
)
def test_escaping_tensors_are_not_released(escape: str) -> None:
    source = f"""
    import torch

    def f(self, s, cache, out):
        x = torch.ones(4, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out.copy_(x)
        {escape}
    """
    assert hazards(source, FREE) == set()


def test_release_points() -> None:
    source = """
    import torch

    def f(s, out):
        x = torch.ones(4, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out.copy_(x)
        return out.sum()
    """
    flow = _flow(source)
    [hazard] = [h for h in flow.hazards if h.kind is FREE]
    assert (hazard.tensor, flow.line(hazard.access.node), hazard.other, hazard.release) == (
        "x",
        8,
        CURRENT,
        None,
    )


def test_module_globals_are_never_released() -> None:
    source = """
    import torch

    s = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    z = y + 1
    """
    assert hazards(source) == set()
    assert hazards(source.replace("torch.cuda.current_stream().wait_stream(s)", "x = None"), FREE) == {
        ("FREE_IN_USE", "x", 8, "s", CURRENT)
    }


def test_functions_without_with_are_not_interpreted() -> None:
    source = """
    import torch

    def helper(x, s):
        torch.cuda.current_stream().wait_stream(s)
        return x + 1
    """
    assert _flow(source).hazards == []


def test_no_torch_import_means_no_analysis() -> None:
    source = """
    def f(x, s):
        y = x * 2
        with torch.cuda.stream(s):
            z = y + 1
    """
    assert _flow(source).hazards == []


def test_statement_span_outside_a_block_covers_the_statement() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
        z = torch.cat(
            [y, x],
        )
        torch.cuda.synchronize()
        return z
    """
    flow = _flow(source)
    [hazard] = flow.hazards
    assert flow.location(hazard)["span"] == Span(7, 9)
    assert flow.location(hazard)["line"] == 8


def test_nested_function_is_its_own_scope() -> None:
    source = """
    import torch

    def outer(x, s):
        y = x * 2
        def inner(z):
            with torch.cuda.stream(s):
                return z + 1
        with torch.cuda.stream(s):
            inner = y + 1
        torch.cuda.synchronize()
        return inner
    """
    flow = _flow(source)
    assert {(h.function, flow.line(h.access.node)) for h in flow.hazards} == {("outer", 10)}


def test_match_statement() -> None:
    source = """
    import torch

    def f(x, s, mode):
        match mode:
            case "join":
                with torch.cuda.stream(s):
                    y = x * 2
                torch.cuda.current_stream().wait_stream(s)
            case _:
                with torch.cuda.stream(s):
                    y = x * 3
        return y + 1
    """
    assert hazards(source, RAW) == {raw("y", 13, CURRENT, "s")}


def test_in_place_writes_through_views_write_the_base() -> None:
    source = """
    import torch

    def f(x, s, i):
        buf = torch.zeros(8, device="cuda")
        with torch.cuda.stream(s):
            buf[i].copy_(x)
            buf.view(-1).add_(1)
            buf[0] = 3
        torch.cuda.current_stream().wait_stream(s)
        return buf
    """
    assert {(k, line) for k, _, line, _, _ in hazards(source)} == {("WRITE_AFTER_WRITE", 7)}


def test_stream_bound_to_a_second_name() -> None:
    source = """
    import torch

    class Loader:
        def load(self, batch):
            s = self.copy_stream
            with torch.cuda.stream(s):
                out = batch.cuda(non_blocking=True)
            torch.cuda.current_stream().wait_stream(self.copy_stream)
            return out
    """
    assert hazards(source, RAW, WAW, WAR) == set()


def test_called_names_are_not_tensor_reads() -> None:
    source = """
    import torch

    model = torch.nn.Linear(4, 4)
    model = model.cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = model(torch.ones(4, device="cuda"))
    """
    assert hazards(source) == set()


@pytest.mark.parametrize("collective", ["all_reduce(summed)", "reduce_scatter_single(summed, grad)"])
def test_collectives_write_their_tensor(collective: str) -> None:
    source = f"""
    import torch
    import torch.distributed as dist

    def f(grad, s):
        with torch.cuda.stream(s):
            summed = grad * 2
        dist.{collective}
        return summed
    """
    assert hazards(source, WAW) == {("WRITE_AFTER_WRITE", "summed", 8, CURRENT, "s")}


def test_comparisons_and_walrus_make_tensors() -> None:
    source = """
    import torch

    def f(x, s):
        mask = x > 0
        if (y := torch.relu(x)) is not None:
            pass
        with torch.cuda.stream(s):
            a = mask & y
        torch.cuda.synchronize()
        return a
    """
    assert hazards(source, RAW) == {raw("mask", 9, "s", CURRENT), raw("y", 9, "s", CURRENT)}


def test_yielded_tensors_escape() -> None:
    source = """
    import torch

    def batches(xs, s):
        for x in xs:
            y = torch.relu(x)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                z = y * 2
            yield y
    """
    assert hazards(source, FREE) == set()


def test_async_functions() -> None:
    source = """
    import torch

    async def f(x, s, client):
        y = await client.fetch(x)
        with torch.cuda.stream(s):
            z = y * 2
        await client.send(z)
    """
    assert hazards(source, RAW) == {raw("y", 7, "s", CURRENT), raw("z", 8, CURRENT, "s")}


def test_break_inside_a_stream_block_leaves_the_block() -> None:
    source = """
    import torch

    def f(xs, s):
        for x in xs:
            with torch.cuda.stream(s):
                y = torch.relu(x)
                if y is None:
                    break
            torch.cuda.current_stream().wait_stream(s)
        else:
            return None
        z = torch.relu(xs)
        with torch.cuda.stream(s):
            w = z + 1
    """
    assert hazards(source, RAW) == {raw("z", 15, "s", CURRENT)}


def test_one_release_reported_per_use() -> None:
    source = """
    import torch

    def f(xs, s, out):
        for b in xs:
            x = torch.relu(b)
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out.copy_(x)
    """
    assert hazards(source, FREE) == {("FREE_IN_USE", "x", 9, "s", CURRENT)}


def test_handing_a_tensor_back_is_not_a_use() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
            done = s.record_event()
        alias = y
        pair = [alias, done]
        return y, done
    """
    assert hazards(source) == set()


@pytest.mark.parametrize("call", ["print(y)", "n = int(y.sum())", "flag = bool(y.any())", "text = str(y)"])
def test_builtins_that_read_values_sync_the_host(call: str) -> None:
    source = f"""
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
            {call}
        return y + 1
    """
    assert hazards(source, RAW) == set()


def test_metadata_builtins_do_not_read() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
        n = len(y)
        ok = isinstance(y, torch.Tensor)
        torch.cuda.current_stream().wait_stream(s)
        return y + n
    """
    assert hazards(source, RAW) == set()


def test_method_helpers_of_the_same_class() -> None:
    source = """
    import torch

    class Loader:
        def _wait_copy(self):
            torch.cuda.current_stream().wait_stream(self.copy_stream)

        def load(self, batch):
            with torch.cuda.stream(self.copy_stream):
                out = batch.cuda(non_blocking=True)
            self._wait_copy()
            return out.float()

    class Other:
        def _wait_copy(self):
            pass

        def load(self, batch):
            with torch.cuda.stream(self.copy_stream):
                out = batch.cuda(non_blocking=True)
            self._wait_copy()
            return out.float()
    """
    assert hazards(source, RAW) == {raw("out", 22, CURRENT, "self.copy_stream")}


def test_long_operator_chains_do_not_exhaust_the_stack() -> None:
    chain = " + ".join(["x"] * 1100)  # deeper than the default recursion limit; libcst parses it slowly
    source = f"import torch\n\ndef f(x, s):\n    with torch.cuda.stream(s):\n        y = {chain}\n    return y\n"
    assert analyse(cst.parse_module(source), "m.py").hazards == []


def test_a_stream_chosen_on_a_branch_is_judged_on_each_choice() -> None:
    """`chosen` is `a` or `b` after the `if`, as `b if flag else a` would be: `y`, written on `a`,
    is read on `b` on the path where the flag held."""
    source = """
    import torch

    def f(x, a, b, flag):
        chosen = a
        same = a
        if flag:
            chosen = b
        with torch.cuda.stream(a):
            y = x * 2
        with torch.cuda.stream(chosen):
            z = y + 1
        with torch.cuda.stream(same):
            w = y + 2
        torch.cuda.synchronize()
        return z, w
    """
    assert hazards(source) == {("READ_AFTER_WRITE", "y", 12, "b", "a")}


def test_a_stream_chosen_the_same_on_every_branch_is_that_stream() -> None:
    source = """
    import torch

    def f(x, a, b, flag):
        if flag:
            chosen = b
        else:
            chosen = b
        y = x * 2
        with torch.cuda.stream(chosen):
            z = y + 1
        torch.cuda.current_stream().wait_stream(b)
        return z + 1
    """
    assert hazards(source, RAW) == {raw("y", 11, "b", CURRENT)}


def test_annotations_say_which_parameters_may_be_tensors() -> None:
    source = """
    import torch

    def f(handle: "FlatParamHandle", x: torch.Tensor, group: object, s):
        flag = handle.pre_unshard()
        y = x * 2
        factor = scale(group)
        with torch.cuda.stream(s):
            z = y + factor + flag
        torch.cuda.synchronize()
        return z
    """
    assert hazards(source, RAW) == {raw("y", 9, "s", CURRENT)}


@pytest.mark.parametrize(("test", "synced"), [("y.any()", True), ("y > 0", True), ("y is None", False)])
def test_a_tensor_condition_syncs_the_host(test: str, synced: bool) -> None:
    source = f"""
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
            if {test}:
                n = 1
        return y + 1
    """
    assert (hazards(source, RAW) == set()) is synced


def test_builtins_on_host_values_do_not_sync() -> None:
    source = """
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
            n = int(1000 * cycles_per_ms())
            print("launched", n)
        return y + 1
    """
    assert hazards(source, RAW) == {raw("y", 9, CURRENT, "s")}


@pytest.mark.parametrize(
    "allocation",
    [
        "torch.empty(4, pin_memory=True)",
        'torch.zeros(4, device="cpu")',
        'torch.zeros(4, device="cpu:0")',
        "torch.zeros(4, device=torch.device('cpu'))",
        "torch.empty_like(w, pin_memory=True).pin_memory()",
        "w.new_empty(4).pin_memory()",
    ],
)
def test_host_allocations_launch_no_kernel(allocation: str) -> None:
    source = f"""
    import torch

    def offload(w, s):
        buf = {allocation}
        with torch.cuda.stream(s):
            y = torch.ones(4, device="cuda")
            buf.copy_(y, non_blocking=True)
        torch.cuda.current_stream().wait_stream(s)
        return buf
    """
    assert hazards(source) == set()


def test_a_device_allocation_is_still_a_write() -> None:
    source = """
    import torch

    def offload(s):
        buf = torch.zeros(4, device="cuda", pin_memory=False)
        with torch.cuda.stream(s):
            buf.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        return buf
    """
    assert hazards(source, WAW) == {("WRITE_AFTER_WRITE", "buf", 7, "s", CURRENT)}


@pytest.mark.parametrize(
    ("spin", "synced"),
    [
        ("done = torch.cuda.Event(); done.record(s)\n        while not done.query():\n            pass", True),
        ("while not s.query():\n            time.sleep(0)", True),
        ("while not s.query():\n            pass\n        else:\n            n = 1", True),
        ("while s.query():\n            pass", False),
        ("while not other.query():\n            pass", False),
        ("done = torch.cuda.Event(); done.record(other)\n        while not done.query():\n            pass", False),
    ],
)
def test_spinning_on_query_orders_the_host(spin: str, synced: bool) -> None:
    source = f"""
    import time
    import torch

    def f(x, s, other):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = x * 2
        {spin}
        return y.sum()
    """
    assert (hazards(source, RAW) == set()) is synced


def test_a_break_out_of_a_query_spin_orders_nothing() -> None:
    source = """
    import torch

    def f(x, s, give_up):
        with torch.cuda.stream(s):
            y = x * 2
        while not s.query():
            if give_up():
                break
        return y.sum()
    """
    assert hazards(source, RAW) == {raw("y", 10, CURRENT, "s")}


@pytest.mark.parametrize("rebind", ["a = x\n        a = layer(a)", "a = x * 2\n        a = layer(a)", "a = layer(x)"])
def test_a_call_given_a_rebound_tensor_makes_a_tensor(rebind: str) -> None:
    source = f"""
    import torch

    def offload(layer, x, s):
        {rebind}
        with torch.cuda.stream(s):
            b = a.to("cpu", non_blocking=True)
        return b
    """
    assert ("READ_AFTER_WRITE", "a") in {found[:2] for found in hazards(source, RAW)}


def test_a_copied_name_of_unknown_origin_is_still_ready() -> None:
    source = """
    import torch

    def offload(x, s):
        a = x
        with torch.cuda.stream(s):
            b = a.to("cpu", non_blocking=True)
        return b
    """
    assert hazards(source, RAW) == set()


@pytest.mark.parametrize(
    "comprehension",
    ["[g.norm() for g in others]", "{g: g.norm() for g in others}", "sum(g.norm() for g in others if g.numel())"],
)
def test_comprehension_variables_have_their_own_scope(comprehension: str) -> None:
    source = f"""
    import torch

    def f(grads, others, s):
        for g in grads:
            with torch.cuda.stream(s):
                g.div_(2)
            norms = {comprehension}
            torch.cuda.current_stream().wait_stream(s)
            h = g + 1
        return norms, h
    """
    assert hazards(source) == set()


def test_a_comprehension_reads_the_enclosing_tensors_it_names() -> None:
    source = """
    import torch

    def f(x, s, n):
        with torch.cuda.stream(s):
            y = x * 2
        parts = [y[i] + i for i in range(n)]
        return parts
    """
    assert hazards(source, RAW) == {raw("y", 7, CURRENT, "s")}


@pytest.mark.parametrize(
    ("imports", "cuda", "spelled"),
    [
        ("import torch", "torch.cuda", "torch.cuda.current_stream()"),
        ("import torch.cuda as tc", "tc", "tc.current_stream()"),
        ("import torch as th", "th.cuda", "th.cuda.current_stream()"),
    ],
)
def test_help_spells_the_current_stream_as_the_fix_does(imports: str, cuda: str, spelled: str) -> None:
    source = textwrap.dedent(
        f"""
        {imports}

        def step(model, batch, side):
            out = model(batch)
            with {cuda}.stream(side):
                loss = out.sum()
            return loss + 1
        """
    )
    findings = {finding.code: finding for finding in lint_source(source, "m.py")}
    assert {"CSL101", "CSL102"} <= findings.keys()
    for finding in findings.values():
        assert finding.fix is not None and spelled in finding.fix, finding.fix
        assert all(spelled in edit.text for edit in finding.edits)
        if spelled != "torch.cuda.current_stream()":
            assert "torch.cuda.current_stream()" not in finding.fix


@pytest.mark.parametrize(("logged", "escapes"), [("[g.norm() for g in others]", False), ("[g, *others]", True)])
def test_a_comprehension_target_does_not_hand_on_the_enclosing_tensor(logged: str, escapes: bool) -> None:
    source = f"""
    import torch

    def f(x, others, s):
        g = x * 2
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            h = g + 1
        log({logged})
        return h
    """
    assert (hazards(source, FREE) == set()) is escapes


@pytest.mark.parametrize(
    ("branches", "flagged"),
    [
        ("if s.query():\n            n = y.sum()", set()),
        ("if not s.query():\n            n = 0\n        else:\n            n = y.sum()", set()),
        ("if s.query():\n            n = 0\n        else:\n            n = y.sum()", {10}),
        ("if not s.query():\n            n = y.sum()", {8}),
        ("if s.query():\n            n = 0\n        n = y.sum()", {9}),
    ],
)
def test_a_query_that_returned_true_orders_its_branch(branches: str, flagged: set[int]) -> None:
    source = f"""
    import torch

    def f(x, s):
        with torch.cuda.stream(s):
            y = x * 2
        {branches}
        return n
    """
    assert {line for _, _, line, _, _ in hazards(source, RAW)} == flagged
