"""The host-side interpreter on small programs: which host accesses it finds racing with a
pending copy, which waits order nothing, which captures are malformed, and the messages."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from csan_lint.lint.engine import lint_source
from csan_lint.lint.hostflow import host_hazards
from csan_lint.lint.model import Span
from csan_lint.lint.registry import rule_by_code
from csan_lint.lint.shell.config import load_config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.streamflow import analyse
from csan_lint.runtime import kinds


def hazards(source: str) -> set[tuple[str, int]]:
    """(kind, line) of every host hazard."""
    source = textwrap.dedent(source)
    flow = analyse(cst.parse_module(source), "m.py")
    return {(hazard.kind, flow.line(hazard.node)) for hazard in host_hazards(flow)}


DOWNLOAD = """
import torch

def helper():
    torch.cuda.synchronize()

def f(x, s, other, y):
    with torch.cuda.stream(s):
        host = x.to("cpu", non_blocking=True)
        {inside}
    {between}
    return host.tolist()
"""


@pytest.mark.parametrize(
    ("inside", "between"),
    [
        ("pass", "torch.cuda.synchronize()"),
        ("pass", "s.synchronize()"),
        ("pass", "while not s.query():\n        pass"),
        ("done = s.record_event()", "done.synchronize()"),
        ("pass", "done = torch.cuda.Event(); done.record(s); done.synchronize()"),
        ("pass", "torch.cuda.current_stream().wait_stream(s); y.item()"),
        ("y.item()", "pass"),
        ("pass", "helper()"),
        ("pass", "torch.cuda.current_stream().wait_stream(s); torch.cuda.current_stream().synchronize()"),
    ],
)
def test_syncs_that_cover_the_copy(inside: str, between: str) -> None:
    assert hazards(DOWNLOAD.format(inside=inside, between=between)) == set()


@pytest.mark.parametrize(
    ("inside", "between"),
    [
        ("pass", "pass"),
        ("pass", "other.synchronize()"),
        ("pass", "torch.cuda.current_stream().synchronize()"),
        ("pass", "y.item()"),
        ("pass", "done = torch.cuda.Event(); done.record(); done.synchronize()"),
        ("done = s.record_event()", "done.record(other); done.synchronize()"),
        ("pass", "if y:\n        torch.cuda.synchronize()"),
        ("pass", "s.query()"),  # a poll whose answer is ignored waits for nothing, as in streamflow
    ],
)
def test_syncs_that_do_not_cover_the_copy(inside: str, between: str) -> None:
    line = 12 + between.count("\n")
    assert hazards(DOWNLOAD.format(inside=inside, between=between)) == {(kinds.HOST_READ_PENDING, line)}


@pytest.mark.parametrize("builtin", ["int(y)", "float(y)", "bool(y)", "str(y)", "repr(y)", "format(y)", "print(y)"])
def test_a_builtin_that_converts_or_formats_a_device_tensor_syncs_the_current_stream(builtin: str) -> None:
    """`int` calls `.item()`; `str`, `repr`, `format` and `print` format from a copy on the host:
    each waits for the current stream, which waited for `s`."""
    between = f"torch.cuda.current_stream().wait_stream(s); {builtin}"
    assert hazards(DOWNLOAD.format(inside="pass", between=between)) == set()


@pytest.mark.parametrize("builtin", ["print('waiting')", "str(3)", "print(f'step {1}')", "int('8')"])
def test_a_builtin_given_only_literals_syncs_nothing(builtin: str) -> None:
    between = f"torch.cuda.current_stream().wait_stream(s); {builtin}"
    assert hazards(DOWNLOAD.format(inside="pass", between=between)) == {(kinds.HOST_READ_PENDING, 12)}


def test_converting_the_pending_host_buffer_reads_it_and_syncs_nothing() -> None:
    """`int(host)` reads host memory: no device work is waited for, the other copy stays pending."""
    source = """
    import torch

    def f(x, z):
        host = x.to("cpu", non_blocking=True)
        other = z.to("cpu", non_blocking=True)
        n = int(host)
        return other.tolist()
    """
    assert hazards(source) == {(kinds.HOST_READ_PENDING, 7), (kinds.HOST_READ_PENDING, 8)}


READ = """
import numpy as np
import torch

def keep(value):
    return value

def f(x, log):
    host = x.to("cpu", non_blocking=True)
    {use}
"""


@pytest.mark.parametrize(
    "use",
    ["host[0]", "host.numpy()", "host.item()", "print(host)", "np.asarray(host)", "host + 1",
     "torch.cat([host, host])", "f'{host}'", "if host.sum() > 0: pass", "host.float()",
     "log[:] += host", "log.copy_(host)"],
)  # fmt: skip
def test_host_reads(use: str) -> None:
    assert hazards(READ.format(use=use)) == {(kinds.HOST_READ_PENDING, 10)}


@pytest.mark.parametrize(
    "use",
    ["host.shape", "host.size(0)", "log.append(host)", "keep(host)", "return host",
     "pair = (host, x)", "device = host.to('cuda')", "host.record_stream(None)", "del host",
     "return {'loss': host}", "out = {'loss': host, **log}"],
)  # fmt: skip
def test_uses_that_read_nothing_now(use: str) -> None:
    assert hazards(READ.format(use=use)) == set()


ONE_LINE_BODIES = """
import torch

def f(x, xs, ready, s):
    {copy}
    {read}
"""


@pytest.mark.parametrize(
    ("copy", "read", "line"),
    [
        ('if ready: host = x.to("cpu", non_blocking=True)', "if ready: print(host)", 6),
        ('host = x.to("cpu", non_blocking=True)', "for item in xs: print(host[item])", 6),
        ('host = x.to("cpu", non_blocking=True)', "while ready: ready = host[0]", 6),
        ('with torch.cuda.stream(s): host = x.to("cpu", non_blocking=True)', "try: host.tolist()\n    except: pass", 6),
        ('host = x.to("cpu", non_blocking=True)', "if ready: pass\n    else: host.numpy()", 7),
    ],
)
def test_statements_in_one_line_bodies_are_interpreted(copy: str, read: str, line: int) -> None:
    assert hazards(ONE_LINE_BODIES.format(copy=copy, read=read)) == {(kinds.HOST_READ_PENDING, line)}


def test_a_sync_in_a_one_line_body_covers_the_copy() -> None:
    read = "if ready: torch.cuda.synchronize()\n    else: torch.cuda.current_stream().synchronize()\n    host.numpy()"
    assert hazards(ONE_LINE_BODIES.format(copy='host = x.to("cpu", non_blocking=True)', read=read)) == set()


def test_an_alias_of_the_destination_is_the_destination() -> None:
    found = hazards(
        """
        import torch

        def f(x):
            host = x.to("cpu", non_blocking=True)
            view = host
            return view.tolist()
        """
    )
    assert found == {(kinds.HOST_READ_PENDING, 7)}


def test_a_read_is_reported_once_per_copy() -> None:
    found = hazards(
        """
        import torch

        def f(x):
            host = x.to("cpu", non_blocking=True)
            a = host.tolist()
            b = host.tolist()
            host = x.to("cpu", non_blocking=True)
            c = host[0]
        """
    )
    assert found == {(kinds.HOST_READ_PENDING, 6), (kinds.HOST_READ_PENDING, 9)}


UPLOAD = """
import torch

class Loader:
    def __init__(self):
        self.staging = torch.empty(8, pin_memory=True)

    def run(self, batches, s):
        out = []
        for batch in batches:
            {refill}
            with torch.cuda.stream(s):
                out.append(self.staging.to("cuda", non_blocking=True))
            {after}
        return out
"""


@pytest.mark.parametrize("refill", ["self.staging.copy_(batch)", "self.staging[:] = batch", "self.staging += 1",
                                    "torch.add(batch, 1, out=self.staging)", "self.staging.zero_()"])  # fmt: skip
def test_loop_carried_refill_of_a_pinned_attribute(refill: str) -> None:
    found = hazards(UPLOAD.format(refill=refill, after="pass"))
    assert found == {(kinds.HOST_WRITE_PENDING, 11)}


@pytest.mark.parametrize("after", ["s.synchronize()", "torch.cuda.synchronize()"])
def test_refill_after_a_sync_is_safe(after: str) -> None:
    assert hazards(UPLOAD.format(refill="self.staging.copy_(batch)", after=after)) == set()


def test_an_upload_from_pageable_memory_is_not_judged() -> None:
    source = UPLOAD.format(refill="self.staging.copy_(batch)", after="pass")
    assert hazards(source.replace(", pin_memory=True", "")) == set()


def test_reading_the_source_of_an_upload_is_fine() -> None:
    found = hazards(
        """
        import torch

        def f(batch):
            staging = batch.pin_memory()
            device = staging.cuda(non_blocking=True)
            return device, staging.sum(), staging.tolist()
        """
    )
    assert found == set()


EVENTS = """
import torch

def f(x, s, flag, items):
    ready = torch.cuda.Event()
    {before}
    s.wait_event(ready)
"""


@pytest.mark.parametrize(
    ("before", "flagged"),
    [
        ("pass", True),
        ("ready.record()", False),
        ("s.record_event(ready)", False),
        ("if flag:\n        ready.record()", True),
        ("if flag:\n        ready.record()\n    else:\n        ready.record(s)", False),
        ("for item in items:\n        ready.record()", True),
        ("items.append(ready)", False),
        ("ready = s.record_event()", False),
        ("ready.synchronize()", True),
        ("try:\n        ready.record()\n    except RuntimeError:\n        pass", True),
    ],
)
def test_wait_on_an_event_not_recorded_on_every_path(before: str, flagged: bool) -> None:
    expected = {(kinds.WAIT_UNRECORDED_EVENT, 7 + before.count("\n"))} if flagged else set()
    assert hazards(EVENTS.format(before=before)) == expected


CAPTURE = """
import torch

def f(g, s, side, x):
    with torch.cuda.graph(g):
        {fork}
        with torch.cuda.stream(side):
            y = x * 2
            {inside}
        {join}
    return y
"""


@pytest.mark.parametrize(
    ("fork", "inside", "join", "flagged"),
    [
        ("side.wait_stream(torch.cuda.current_stream())", "pass",
         "torch.cuda.current_stream().wait_stream(side)", False),
        ("c = torch.cuda.current_stream(); side.wait_stream(c)", "pass", "c.wait_stream(side)", False),
        ("e = torch.cuda.Event(); e.record(); side.wait_event(e)", "j = side.record_event()", "j.wait()", False),
        ("pass", "pass", "torch.cuda.current_stream().wait_stream(side)", True),
        ("side.wait_stream(torch.cuda.current_stream())", "pass", "pass", True),
        ("side.wait_stream(s)", "pass", "torch.cuda.current_stream().wait_stream(side)", True),
        ("side.wait_stream(torch.cuda.current_stream())", "pass", "s.wait_stream(side)", True),
    ],
)  # fmt: skip
def test_capture_fork_and_join(fork: str, inside: str, join: str, flagged: bool) -> None:
    found = hazards(CAPTURE.format(fork=fork, inside=inside, join=join))
    assert found == ({(kinds.UNJOINED_CAPTURE_FORK, 7)} if flagged else set())


@pytest.mark.parametrize(
    ("setup", "flagged"),
    [
        ("g.capture_begin()", True),
        ("with torch.cuda.stream(s):\n        g.capture_begin()", False),
        ("torch.cuda.set_stream(s)\n    g.capture_begin()", False),
        ("ctx = torch.cuda.stream(s)\n    ctx.__enter__()\n    g.capture_begin()", False),
        ("ctx = torch.cuda.stream(s)\n    with ctx:\n        g.capture_begin()", False),
        ("ctx = torch.cuda.stream(s)\n    ctx = None\n    with ctx:\n        g.capture_begin()", True),
        ("super().capture_begin()", False),
    ],
)
def test_capture_begin_stream(setup: str, flagged: bool) -> None:
    source = f"import torch\n\ndef f(g, s):\n    {setup}\n"
    expected = {(kinds.CAPTURE_ON_DEFAULT_STREAM, 4 + setup.count("\n"))} if flagged else set()
    assert hazards(source) == expected


def test_modules_without_torch_or_without_the_apis_are_skipped() -> None:
    assert hazards("import numpy\nx = numpy.ones(3)\ne = Event()\ne.wait()\n") == set()
    assert hazards("import torch\n\ndef f(x):\n    return x.sum().tolist()\n") == set()


def _only(code: str, source: str):
    rule = rule_by_code(code)
    assert rule is not None
    [finding] = lint_source(textwrap.dedent(source), "m.py", rules=[rule])
    return finding


def test_unsynced_host_read_message() -> None:
    finding = _only(
        "CSL301",
        """
        import torch

        def f(x, s):
            with torch.cuda.stream(s):
                host = x.to("cpu", non_blocking=True)
            return host.numpy()
        """,
    )
    assert finding.message == (
        "'host' is read on the host while the non-blocking copy into it (line 6) may still be running on stream 's'"
    )
    assert finding.fix == (
        "synchronize with the copy first: `s.synchronize()` (or record an event after the copy and `synchronize()` it)"
    )
    assert (finding.line, finding.column, finding.end_line, finding.end_column) == (7, 12, 7, 16)
    assert finding.span == Span(7, 7)


def test_pinned_source_overwrite_message() -> None:
    finding = _only(
        "CSL302",
        """
        import torch

        staging = torch.ones(4).pin_memory()
        device = staging.cuda(non_blocking=True)
        staging.fill_(3)
        """,
    )
    assert finding.message == (
        "pinned buffer 'staging' is overwritten on the host while the non-blocking copy out of it (line 5) "
        "may still be running on the current stream"
    )
    assert finding.fix == (
        "synchronize with the copy before refilling 'staging': `torch.cuda.current_stream().synchronize()` "
        "(or an event recorded after the copy), or alternate between two buffers"
    )
    assert (finding.line, finding.column) == (6, 1)


def test_wait_unrecorded_event_message() -> None:
    finding = _only(
        "CSL401",
        """
        import torch

        def f(s):
            ready = torch.cuda.Event()
            s.wait_event(ready)
        """,
    )
    assert finding.message == "event 'ready' is waited on before it is recorded on every path: the wait orders nothing"
    assert finding.fix == "record 'ready' on the producing stream (`ready.record()`) on every path before waiting on it"
    assert (finding.line, finding.column, finding.span) == (6, 5, Span(6, 6))


def test_capture_on_default_stream_message() -> None:
    finding = _only(
        "CSL501",
        """
        import torch

        g = torch.cuda.CUDAGraph()
        g.capture_begin()
        """,
    )
    assert finding.message == "graph 'g' begins capture on the default stream, which CUDA cannot capture"
    assert finding.fix == (
        "capture with `with torch.cuda.graph(g):`, or call `g.capture_begin()` inside `with torch.cuda.stream(side):`"
    )


def test_unjoined_capture_fork_message() -> None:
    finding = _only(
        "CSL502",
        """
        import torch

        def f(g, s, side, x):
            with torch.cuda.stream(s):
                g.capture_begin()
                with torch.cuda.stream(side):
                    y = x * 2
                g.capture_end()
        """,
    )
    assert finding.message == (
        "stream 'side' is used during CUDA graph capture but is neither forked from nor joined back to stream 's'"
    )
    assert finding.fix == (
        "fork and join inside the capture: `side.wait_stream(s)` before the block, `s.wait_stream(side)` after it"
    )
    assert (finding.line, finding.column) == (7, 14)
    assert finding.span == Span(7, 8)


def test_nested_captures_are_checked_without_crashing() -> None:
    found = hazards(
        """
        import torch

        def f(graph, side, x):
            with torch.cuda.graph(graph):
                with torch.cuda.graph(graph):
                    x.add_(1)
                with torch.cuda.stream(side):
                    y = x * 2
            graph.capture_end()
            return y
        """
    )
    assert found == {(kinds.UNJOINED_CAPTURE_FORK, 8)}


def test_a_new_event_under_an_old_name_orders_nothing() -> None:
    found = hazards(
        """
        import torch

        def f(x):
            done = torch.cuda.Event()
            host = x.to("cpu", non_blocking=True)
            done.record()
            done = torch.cuda.Event()
            done.synchronize()
            return host.tolist()
        """
    )
    assert found == {(kinds.HOST_READ_PENDING, 10)}


@pytest.mark.parametrize(("context", "flagged"), [("torch.cuda.graph(g)", False), ("open(g)", True)])
def test_entering_torch_cuda_graph_synchronizes_the_device(context: str, flagged: bool) -> None:
    """streamflow: `torch.cuda.graph` synchronizes before capturing, so work before it is done."""
    source = textwrap.dedent(
        f"""
        import torch

        def f(g, side, x):
            y = x * 2
            with {context}:
                with torch.cuda.stream(side):
                    z = y + 1
        """
    )
    codes = {finding.code for finding in lint_source(source, "m.py")}
    assert ("CSL101" in codes) == flagged


@pytest.mark.parametrize(
    ("use", "flagged"),
    [
        ("x.to('cpu', non_blocking=True).tolist()", True),
        ("x.to('cpu', non_blocking=True)[0]", False),
        ("x.to('cpu', non_blocking=True).shape", False),
        ("x.to('cpu').tolist()", False),
        ("x.to('cuda', non_blocking=True).tolist()", False),
    ],
)
def test_a_download_read_in_the_same_expression(use: str, flagged: bool) -> None:
    source = f"import torch\n\ndef f(x):\n    return {use}\n"
    assert hazards(source) == ({(kinds.HOST_READ_PENDING, 4)} if flagged else set())


@pytest.mark.parametrize(
    ("use", "flagged"),
    [
        ("state[idx] = x.to('cpu', non_blocking=True)", True),
        ("state[idx] -= x.to(torch.device('cpu'), non_blocking=True)", True),
        ("state.copy_(x.to('cpu', non_blocking=True))", True),
        ("state[idx] = x.to('cpu')", False),
        ("self.state = x.to('cpu', non_blocking=True)", False),
        ("state[idx] = x.to('cuda', non_blocking=True)", False),
    ],
)
def test_a_download_stored_into_memory_that_exists_is_read_there(use: str, flagged: bool) -> None:
    """Never named, the result of a download written into a tensor (an indexed assignment, an
    in-place operator, `copy_`) is read at once; bound to a name, it is read where the name is."""
    source = f"import torch\n\ndef f(self, x, state, idx):\n    {use}\n"
    assert hazards(source) == ({(kinds.HOST_READ_PENDING, 4)} if flagged else set())


def test_a_loop_that_ends_when_a_query_answers_done_orders_the_host() -> None:
    found = hazards(
        """
        import torch

        def f(x, s):
            with torch.cuda.stream(s):
                host = x.to("cpu", non_blocking=True)
                done = s.record_event()
            while not done.query():
                pass
            return host.numpy()
        """
    )
    assert found == set()


@pytest.mark.parametrize(("between", "flagged"), [("torch.cuda.synchronize()", False), ("pass", True)])
def test_numpy_is_an_alias_whose_later_read_is_the_host_read(between: str, flagged: bool) -> None:
    source = f"""
    import torch

    def f(x):
        host = x.to("cpu", non_blocking=True)
        arr = host.numpy()
        {between}
        return arr.sum()
    """
    assert hazards(source) == ({(kinds.HOST_READ_PENDING, 8)} if flagged else set())


@pytest.mark.parametrize(("arguments", "flagged"), [("x", False), ("x, non_blocking=True", True)])
def test_only_a_non_blocking_copy_into_pinned_memory_is_pending(arguments: str, flagged: bool) -> None:
    source = f"""
    import torch

    def f(x):
        host = torch.empty(4, pin_memory=True)
        host.copy_({arguments})
        return host.tolist()
    """
    assert hazards(source) == ({(kinds.HOST_READ_PENDING, 7)} if flagged else set())


FACTORY_EVENT = """\
{comment}import torch

from pkg.cuda_utils import new_event


def step(side: torch.cuda.Stream) -> None:
    done = new_event()
    side.wait_event(done)
"""


@pytest.mark.parametrize("comment", ["", "# an Event from our own factory\n"])
def test_events_of_a_configured_factory_are_followed(tmp_path: Path, comment: str) -> None:
    """`event-factories` alone makes the module's events tracked: neither `Event` in the text
    nor a comment saying it decides."""
    (tmp_path / "pyproject.toml").write_text('[tool.csan-lint]\nevent-factories = ["pkg.cuda_utils.new_event"]\n')
    module = tmp_path / "pkg" / "train.py"
    module.parent.mkdir()
    module.write_text(FACTORY_EVENT.format(comment=comment))
    result = lint_paths([str(module)], load_config([str(module)]), jobs=1)
    assert [(finding.code, finding.line) for finding in result.findings] == [("CSL401", 8 + comment.count("\n"))]


REFILLED_THROUGH_A_SLICE = """
import torch

class Sampler:
    def __init__(self, n):
        self.coins = torch.empty(n, device="cuda")
        self.cpu_coins = torch.empty(n, pin_memory=True)

    def prepare(self, bs):
        {first}
        cpu = self.cpu_coins[:bs]
        for i in range(bs):
            cpu[i].uniform_(0.0, 1.0)
        self.coins[:bs].copy_(cpu, non_blocking=True)
"""


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ("pass", {(kinds.HOST_WRITE_PENDING, 13)}),
        ("torch.cuda.current_stream().synchronize()", set()),
    ],
)
def test_a_slice_of_a_pinned_attribute_is_the_buffer_the_next_call_refills(first: str, expected: set) -> None:
    """`cpu = self.buf[:n]` is a view, not an item read: the upload out of it is one out of
    `self.buf`, still running when the next call refills the buffer through a new view."""
    assert hazards(REFILLED_THROUGH_A_SLICE.format(first=first)) == expected


def test_an_item_read_is_no_view() -> None:
    """`h = host[0]` after a download into `host` reads it at once (the race), and binds no view."""
    source = """
    import torch

    def f(x):
        host = torch.empty(4, pin_memory=True)
        host.copy_(x, non_blocking=True)
        h = host[0]
        return h
    """
    assert hazards(source) == {(kinds.HOST_READ_PENDING, 7)}


def test_attributes_of_another_class_do_not_hide_the_next_call() -> None:
    """Two classes each binding `self.staging` once: within each class the buffer is bound in one
    place, so each method's next call meets its own upload."""
    one = """
    class {name}:
        def __init__(self, n):
            self.out = torch.empty(n, device="cuda")
            self.staging = torch.empty(n, pin_memory=True)

        def push(self, src):
            self.staging.copy_(src)
            self.out.copy_(self.staging, non_blocking=True)
    """
    source = "import torch\n" + textwrap.dedent(one.format(name="A")) + textwrap.dedent(one.format(name="B"))
    assert hazards(source) == {(kinds.HOST_WRITE_PENDING, 9), (kinds.HOST_WRITE_PENDING, 18)}


STAGED_BACK = """
import torch

def stage(grads, side):
    pinned = torch.empty(8, pin_memory=True)
    for g in grads:
        {download}
        torch.cuda.synchronize()
        g.copy_(pinned, non_blocking=True)
"""


@pytest.mark.parametrize(
    ("download", "expected"),
    [
        # the copy into the buffer runs on the stream of the last iteration's upload out of it:
        # the device orders them, and the host writes nothing
        ("pinned.copy_(g, non_blocking=True)", set()),
        # on another stream, nothing orders the two copies of the buffer
        (
            "with torch.cuda.stream(side):\n            pinned.copy_(g, non_blocking=True)",
            {(kinds.HOST_WRITE_PENDING, 8)},
        ),
        # a blocking copy into it is the host's write
        ("pinned.copy_(g)", {(kinds.HOST_WRITE_PENDING, 7)}),
    ],
)
def test_a_copy_into_a_pinned_buffer_is_ordered_after_uploads_on_its_stream(download: str, expected: set) -> None:
    found = hazards(STAGED_BACK.format(download=download))
    assert {h for h in found if h[0] == kinds.HOST_WRITE_PENDING} == expected
