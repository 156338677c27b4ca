"""Only tensors are tensors: which values and uses the stream-flow analysis counts as GPU work."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis.assumptions import COMPREHENDED_LISTS_ARE_TENSORS, Assumptions
from csan_lint.lint.annotations import tensor_annotation
from csan_lint.lint.engine import lint_source


def codes(source: str) -> set[tuple[str, int]]:
    """(code, line) of each finding."""
    return {(finding.code, finding.line) for finding in lint_source(textwrap.dedent(source), "m.py")}


def messages(source: str) -> list[str]:
    return [finding.message for finding in lint_source(textwrap.dedent(source), "m.py")]


SIDE_USE = """
import torch

def f(x, s, items):
    {before}
    with torch.cuda.stream(s):
        {use}
"""


@pytest.mark.parametrize(
    ("before", "use"),
    [
        ("x = 4", "y = torch.ones(x, device='cuda')"),  # a parameter rebound to a number
        ("n = {}; n['a'] = x", "g(n)"),  # a dict filled by subscript assignment
        ("n = []; n.append(x)", "g(n)"),  # a list filled by append
        ("d = x * 2", "flag = d is None"),  # an identity test
        ("d = x * 2", "keep = Holder(d)"),  # handed to a constructor
        ("d = x * 2", "keep = _Result(out=d)"),
        ("d = x * 2", "items.append(d)"),  # stored in a container
        ("d = x * 2", "items[0] = (d, d.size(), x.stride())"),  # a tuple built to be stored
        ("d = x * 2", "pair = [d, {'shape': d.shape, 'kept': d}]"),
        ("d = x + '_' + x", "g(d)"),  # an operator with a string operand builds a string
        ("d = f'{x}_' + x", "g(d)"),
        ("d = '%s' % x", "g(d)"),
        ("d = [None] * len(x)", "d[0] = g(x)"),  # a list repeated is a list: storing in it writes no tensor
        ("d = [x] * 2", "d[0] = g(x)"),
        ("d = x * 2", "a = d.numpy()"),  # an alias of the same memory, not a read
        ("d = x * 2", "v = d.view(-1)"),  # a view: metadata only
        ("d = x * 2", "v = d[0]"),  # basic indexing: a view
        ("d = x * 2", "shape = d.shape; n = d.numel()"),
        ("d = x * 2", "z = torch.zeros_like(d)"),  # shape, dtype and device: no data read
        ("d = x * 2", "h = torch.empty_like(d, device='cpu')"),
        ("d = x * 2", "record_stream(d, s)"),
        ("d = x * 2", "_no_dispatch_record_stream(d, s)"),  # FSDP's: allocator bookkeeping too
        ("d = x * 2", "torch.distributed.utils._no_dispatch_record_stream(d, s)"),
        (
            "d = g(x)",
            "found = 'exp_avg' in d",
        ),  # a key looked up: no tensor holds a string  # a project's helper of that name: allocator bookkeeping
    ],
)
def test_host_only_values_and_uses_are_not_gpu_accesses(before: str, use: str) -> None:
    assert codes(SIDE_USE.format(before=before, use=use)) == set()


@pytest.mark.parametrize(
    ("before", "use"),
    [
        ("d = x * 2", "v = d.view(-1).sum()"),  # a kernel reads through the view
        ("d = x * 2", "v = d[idx]"),  # a tensor index gathers: a kernel
        ("d = x * 2", "items.add(d)"),  # `Tensor.add` when the receiver is a tensor
        ("d = x * 2; d = x + d", "v = d + 1"),
        ("d = x * 2", "v = torch.clone(d)"),  # a copy reads the data
        ("d = x * 2", "v = 2 in d"),  # membership in a tensor compares on the GPU
        ("d = x * 2", "v = torch.add(torch.ones_like(x), d)"),
        ("d = x * 2", "pair = (d.sum(), x.size())"),  # an item computed on the GPU
    ],
)
def test_uses_that_launch_a_kernel_are_still_reads(before: str, use: str) -> None:
    source = SIDE_USE.replace("items", "items, idx").format(before=before, use=use.replace("items.add", "x.add"))
    assert ("CSL101", 7) in codes(source)


@pytest.mark.parametrize(
    "use",
    [
        "for key in groups:\n                g(groups[key])",  # iterated: a container
        "for key, group in groups.items():\n                g(group)",  # a dict's method
        "h = [g(group) for group in groups]",
    ],
)
def test_a_call_result_used_as_a_container_is_no_tensor(use: str) -> None:
    source = f"""
    import torch

    def f(params, s):
        groups = group_by_dtype(params)
        with torch.cuda.stream(s):
            {use}
    """
    assert codes(source) == set()


@pytest.mark.parametrize(
    "store",
    [
        "state['buf'] = x * 2",  # a string key: no tensor is indexed by one
        "state[key] = torch.empty_like(x)",  # a new uninitialized buffer: a reference stored
        "state[key] = torch.empty(4, device='cpu', pin_memory=True)",
    ],
)
def test_storing_into_a_dict_is_no_gpu_write(store: str) -> None:
    source = f"""
    import torch

    def f(state, key, x, s):
        {store}
        with torch.cuda.stream(s):
            g(state)
    """
    assert codes(source) == set()


def test_a_key_test_on_the_callers_dict_is_no_read_of_it() -> None:
    source = """
    import torch

    def move(state, key, s):
        if key not in state:
            return
        with torch.cuda.stream(s):
            state["buf"].copy_(state[key], non_blocking=True)
    """
    assert codes(source) == set()


@pytest.mark.parametrize("store", ["state[key] = x * 2", "state[0] = torch.empty(1, device='cuda')"])
def test_storing_into_what_may_be_a_tensor_writes_it(store: str) -> None:
    source = f"""
    import torch

    def f(key, x, s):
        state = torch.zeros(4, device="cuda")
        {store}
        with torch.cuda.stream(s):
            g(state)
    """
    assert ("CSL101", 8) in codes(source)


def test_the_values_of_a_sparse_tensor_made_by_torch_are_read() -> None:
    source = """
    import torch

    def f(x, s):
        y = torch.sparse_coo_tensor(x, x)
        with torch.cuda.stream(s):
            z = y.values().sum()
        torch.cuda.current_stream().wait_stream(s)
    """
    assert codes(source) == {("CSL101", 7)}


def test_a_call_result_used_like_a_tensor_is_one() -> None:
    source = """
    import torch

    def f(x, s):
        y = model(x)
        with torch.cuda.stream(s):
            z = y.sum()
        torch.cuda.current_stream().wait_stream(s)
    """
    assert codes(source) == {("CSL101", 7)}


@pytest.mark.parametrize(
    "use",
    [
        "losses.backward()",  # a method only tensors have
        "torch.sum(losses, dim=0).backward()",  # an operand of a torch op
        "out = losses.div_(2)",
    ],
)
def test_what_unknown_code_returns_is_a_tensor_where_used_as_one(use: str) -> None:
    source = f"""
    import torch

    class Pipeline:
        def progress(self):
            losses = self.forward_step(self.batches[0])
            with torch.cuda.stream(self.side):
                {use}
            torch.cuda.current_stream().wait_stream(self.side)
    """
    assert ("CSL101", 8) in codes(source)


@pytest.mark.parametrize(
    "use",
    [
        "gpu = batch.to('cuda', non_blocking=True)",  # moved to the device: a loader's batch is on the host
        "gpu = torch.frombuffer(batch, dtype=torch.uint8).cuda()",  # Python data, not a tensor
        "g(batch)",  # unknown code given an unknown value: nothing says it is a tensor
        "n = batch.shape[0] * 2",
    ],
)
def test_what_unknown_code_returns_is_no_tensor_where_only_moved_or_passed_on(use: str) -> None:
    source = f"""
    import torch

    class Loader:
        def load(self):
            batch = next(self.loader)
            with torch.cuda.stream(self.side):
                {use}
            torch.cuda.current_stream().wait_stream(self.side)
    """
    assert codes(source) == set()


def test_autograd_ctx_is_no_tensor() -> None:
    source = """
    import torch

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, s):
            ctx.mark_dirty(x)
            with torch.cuda.stream(s):
                ctx.s = s
                n = ctx.needs_input_grad
            return x
    """
    assert codes(source) == set()


def test_names_computing_an_index_are_numbers() -> None:
    source = """
    import torch

    def f(block, n, chunk, streams, chunks):
        k = block * n + chunk
        side = streams[k % 2]
        with torch.cuda.stream(side):
            g(chunks[k], k)
    """
    assert codes(source) == set()


def test_iterating_a_literal_list_reads_none_of_its_items() -> None:
    source = """
    import torch

    def f(x, s):
        y = x * 2
        with torch.cuda.stream(s):
            total = sum([size_of(t) for t in [x, y]])
    """
    assert codes(source) == set()


def test_loop_targets_over_range_are_numbers() -> None:
    source = """
    import torch

    def f(s, n):
        for i in range(n):
            with torch.cuda.stream(s):
                buf = torch.ones(i, device="cuda")
            i += 1
        for k, item in enumerate(n):
            with torch.cuda.stream(s):
                out = torch.ones(k, device="cuda")
            k += 1
    """
    assert codes(source) == set()


def test_tuple_assignment_pairs_names_with_their_values() -> None:
    source = """
    import torch

    def f(x, s):
        a, b = x * 2, 3
        with torch.cuda.stream(s):
            y = a + 1
            z = torch.ones(b, device="cuda")
        torch.cuda.current_stream().wait_stream(s)
    """
    assert codes(source) == {("CSL101", 7)}


ALLOCATION = """
import torch

def f(x, s):
    {before}
    y = torch.empty(4, device="cuda")
    {between}
    with torch.cuda.stream(s):
        y.copy_(x)
    torch.cuda.current_stream().wait_stream(s)
    return y
"""


def test_an_allocation_used_on_another_stream_with_no_wait_is_flagged_as_an_allocation() -> None:
    source = ALLOCATION.format(before="pass", between="pass")
    assert messages(source) == [
        "'y' was allocated on the current stream and is first used on side stream 's' "
        "with no wait_stream/wait_event between them"
    ]


@pytest.mark.parametrize(
    ("before", "between", "flagged"),
    [
        # a wait after the stream's last launch covers the allocation, even written before it
        ("s.wait_stream(torch.cuda.current_stream())", "pass", False),
        ("pass", "s.wait_stream(torch.cuda.current_stream())", False),
        # a launch on the current stream after the wait: the block may be that launch's
        ("s.wait_stream(torch.cuda.current_stream()); z = x * 2", "pass", True),
        ("e = torch.cuda.current_stream().record_event(); s.wait_event(e)", "pass", False),
    ],
)
def test_an_allocation_is_ordered_where_the_last_launch_before_it_is(before: str, between: str, flagged: bool) -> None:
    assert bool(codes(ALLOCATION.format(before=before, between=between))) == flagged


def test_an_allocation_writes_no_data_read_by_a_later_overwrite_check() -> None:
    """`torch.empty` on the side stream, then filled there: one stream, no finding; a host tensor
    from numpy is written by no stream."""
    source = """
    import numpy as np
    import torch

    def f(x, s):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = torch.empty_like(x)
            y.copy_(x)
        a = torch.from_numpy(np.zeros(4))
        with torch.cuda.stream(s):
            b = a.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(s)
        return y, b
    """
    assert codes(source) == set()


def test_set_rebinds_storage_without_writing_data() -> None:
    source = """
    import torch

    def f(x, s):
        y = torch.empty(0, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        y.set_(x)
        with torch.cuda.stream(s):
            z = y * 2
        torch.cuda.current_stream().wait_stream(s)
        return z
    """
    assert codes(source) == set()


WORK = """
import torch
import torch.distributed as dist

def f(x, s):
    with torch.cuda.stream(s):
        y = x * 2
        work = dist.all_reduce(y, async_op=True)
    {wait}
    return y.sum()
"""


def test_waiting_on_an_async_collective_orders_the_current_stream_after_it() -> None:
    assert codes(WORK.format(wait="work.wait()")) == set()
    assert codes(WORK.format(wait="pass")) == {("CSL102", 10)}


HANDLE_KEPT = """
import torch

class GradSync:
    def launch(self):
        with torch.cuda.stream(self.side):
            for chunk in self.chunks:
                work = self.scatter(chunk.grads)
                torch.distributed.all_reduce(chunk.grads, async_op=True)
            self.work = work
        {use}
"""


def test_what_unknown_code_returned_and_is_waited_is_a_handle_read_by_no_kernel() -> None:
    """No tensor has `.wait()`: the result of `self.scatter` is a collective's handle."""
    assert codes(HANDLE_KEPT.format(use="self.work.wait()")) == set()
    assert codes(HANDLE_KEPT.format(use="self.work.sum()")) == {("CSL102", 11)}


HANDLES = """
import torch
import torch.distributed as dist

def exchange(inputs, side, group):
    outputs, reqs = [None] * len(inputs), [None] * len(inputs)
    for i in range(len(inputs) + 1):
        if i < len(inputs):
            outputs[i] = torch.empty_like(inputs[i])
            reqs[i] = dist.all_to_all_single(outputs[i], inputs[i], group=group, async_op=True)
        if i > 0:
            with torch.cuda.stream(side):
                {wait}
                y = outputs[i - 1] * 2
    torch.cuda.current_stream().wait_stream(side)
"""


def test_waiting_on_a_collective_handle_kept_in_a_list_orders_the_waiting_stream() -> None:
    """TE's all-to-all: the side stream waits the handle of the previous step's collective,
    launched on the current stream after its output was allocated. (Handles waited in a loop
    over the list are not enough: the loop may run zero times.)"""
    assert ("CSL101", 14) not in codes(HANDLES.format(wait="reqs[i - 1].wait()"))
    assert ("CSL101", 14) in codes(HANDLES.format(wait="pass"))


def test_the_inline_record_and_wait_idiom_orders_the_waiting_stream() -> None:
    source = """
    import torch

    def f(x, s):
        y = x * 2
        s.wait_event(torch.cuda.current_stream().record_event())
        with torch.cuda.stream(s):
            z = y + 1
        torch.cuda.current_stream().wait_event(s.record_event())
        return z
    """
    assert codes(source) == set()


FREE = """
import torch

def f(x, s):
    full = torch.empty(8, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        full.copy_(x)
    {between}
    full.untyped_storage().resize_(0)
"""


def test_resizing_a_storage_to_zero_frees_it_while_another_stream_may_use_it() -> None:
    [finding] = lint_source(textwrap.dedent(FREE.format(between="pass")), "m.py")
    assert (finding.code, finding.line) == ("CSL201", 8)
    assert "freed by resizing its storage to 0 at line 10" in finding.message


@pytest.mark.parametrize("between", ["torch.cuda.current_stream().wait_stream(s)", "full.record_stream(s)"])
def test_a_storage_freed_after_a_join_or_a_record_is_fine(between: str) -> None:
    assert codes(FREE.format(between=between)) == set()


HELPER = """
import torch

def nbytes(t, dim=0):
    {helper}

class Engine:
    @staticmethod
    def _nbytes(t):
        {helper}

    def offload(self, x, s):
        with torch.cuda.stream(s):
            y = x * 2
        self.total = {call}
"""


@pytest.mark.parametrize("call", ["self._nbytes(y)", "nbytes(y)", "nbytes(dim=1, t=y)"])
@pytest.mark.parametrize(
    "helper",
    [
        "return t.element_size() * t.nelement()",
        "return 0 if t is None else len(t) * t.shape[0] * t.size(dim)",
        "return isinstance(t, torch.Tensor) and t.dtype == torch.float16",
    ],
)
def test_a_helper_that_only_asks_for_metadata_reads_no_data(call: str, helper: str) -> None:
    assert codes(HELPER.format(helper=helper, call=call)) == set()


@pytest.mark.parametrize("call", ["self._nbytes(y)", "nbytes(y)"])
@pytest.mark.parametrize("helper", ["return t.sum()", "return t.nelement() * 2 + t", "return g(t)"])
def test_a_helper_that_uses_the_data_reads_it(call: str, helper: str) -> None:
    assert ("CSL102", 15) in codes(HELPER.format(helper=helper, call=call))


BARRIER = """
import torch
{imports}

def f(s, n):
    x = torch.ones(n, device="cuda")
    {barrier}
    with torch.cuda.stream(s):
        y = x * 2
    torch.cuda.current_stream().wait_stream(s)
"""


@pytest.mark.parametrize(
    ("imports", "barrier"),
    [
        ("import torch.distributed as dist", "dist.barrier()"),
        ("from deepspeed import comm as dist", "dist.barrier(group=None)"),
    ],
)
def test_a_barrier_syncs_the_current_stream_with_the_host(imports: str, barrier: str) -> None:
    """NCCL's barrier returns once the current stream's work is done: later launches follow it."""
    assert codes(BARRIER.format(imports=imports, barrier=barrier)) == set()


@pytest.mark.parametrize("barrier", ["dist.barrier(async_op=True)", "pass"])
def test_a_barrier_handle_or_no_barrier_leaves_the_side_stream_unordered(barrier: str) -> None:
    source = BARRIER.format(imports="import torch.distributed as dist", barrier=barrier)
    assert codes(source) == {("CSL101", 9)}


@pytest.mark.parametrize(
    ("annotation", "tensor"),
    [
        ("torch.Tensor", True),
        ("Tensor", True),
        ("Optional[torch.Tensor]", True),
        ("list[nn.Parameter]", True),
        ('"torch.Tensor"', True),
        ("Tensor | None", True),
        ("torch.cuda.FloatTensor", True),
        ("TensorDict", False),  # another type whose name contains the word
        ("MyTensorLike", False),
        ("int", False),
        ('"not valid python ("', False),
    ],
)
def test_a_tensor_annotation_names_the_type_not_the_word(annotation: str, tensor: bool) -> None:
    assert tensor_annotation(cst.parse_expression(annotation)) is tensor


LISTS = Assumptions.from_switches([(COMPREHENDED_LISTS_ARE_TENSORS, True)])


@pytest.mark.parametrize(
    ("before", "use", "found"),
    [
        ("d = [torch.randn(n, device='cuda') for n in x.shape]", "v = d[0] + 1", True),  # a list made of tensors
        ("d = list(x.new_ones(n) for n in x.shape)", "v = d[0] + 1", True),
        ("d = [torch.empty(0, device='cuda') for _ in x.shape]", "d[0] = torch.cat([x, x])", False),  # replaced
        ("d = [g(n) for n in x.shape]", "v = d[0] + 1", False),  # unknown items: not followed
    ],
)
def test_a_list_of_tensors_a_comprehension_makes_under_its_assumption(before: str, use: str, found: bool) -> None:
    source = textwrap.dedent(SIDE_USE.format(before=before, use=use))
    on = {(f.code, f.line) for f in lint_source(source, "m.py", assumptions=LISTS)}
    assert (("CSL101", 7) in on) is found
    assert codes(SIDE_USE.format(before=before, use=use)) == on  # on by default
    off = Assumptions.from_switches([(COMPREHENDED_LISTS_ARE_TENSORS, False)])
    assert {f.code for f in lint_source(source, "m.py", assumptions=off)} == set()  # off: a container
