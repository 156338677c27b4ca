"""Cross-function flow: summaries of functions, their replay at call sites (same module, `self`
methods, other linted modules), and `self` attributes followed from a producer method to a
consumer method."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from csan_lint.lint import streamflow
from csan_lint.lint.analysis.tokens import CURRENT, HOST
from csan_lint.lint.engine import lint_source
from csan_lint.lint.shell.config import Config
from csan_lint.lint.shell.runner import lint_paths
from csan_lint.lint.streamflow import analyse, module_helpers
from csan_lint.lint.summaries import ANY_OTHER, Effect, PackageIndex, Summary, module_name


def summary(source: str, name: str) -> Summary | None:
    helpers = module_helpers(textwrap.dedent(source))
    assert helpers is not None
    return helpers.summary(name)


def orders(source: str, name: str) -> dict[str, frozenset[str]]:
    found = summary(source, name)
    return dict(found.orders) if found is not None else {}


def hazards(source: str, package: PackageIndex | None = None) -> set[tuple[str, int, str, str]]:
    """(kind, line, tensor, other stream) for each hazard, and the producer when it is named."""
    source = textwrap.dedent(source)
    flow = analyse(cst.parse_module(source), "m.py", package=package)
    return {(hazard.kind.name, flow.line(hazard.access.node), hazard.tensor, hazard.other) for hazard in flow.hazards}


# ---- summaries


def test_a_wait_orders_the_waited_stream_before_the_waiting_one() -> None:
    source = """
    import torch

    def join(a, b):
        a.wait_stream(b)
    """
    assert orders(source, "join") == {"b": frozenset({"b", "a"})}


def test_a_device_sync_orders_every_stream_before_the_host() -> None:
    source = """
    import torch

    def settle(log):
        log.info("waiting")
        torch.cuda.synchronize()
    """
    facts = orders(source, "settle")
    assert facts[ANY_OTHER] == frozenset({HOST})
    assert HOST in facts[CURRENT]


def test_an_ordering_anywhere_on_every_returning_path_counts() -> None:
    source = """
    import torch

    def join(side, items):
        total = 0
        for item in items:
            total += item
        if total:
            torch.cuda.current_stream().wait_stream(side)
        else:
            torch.cuda.current_stream().wait_stream(side)
        return total
    """
    assert orders(source, "join")["side"] == frozenset({"side", CURRENT})


@pytest.mark.parametrize(
    "body",
    [
        "if flag:\n        torch.cuda.current_stream().wait_stream(side)",
        "if flag:\n        return\n    torch.cuda.current_stream().wait_stream(side)",
        "yield\n    torch.cuda.current_stream().wait_stream(side)",
        "other = torch.cuda.Stream()\n    other.wait_stream(side)",
    ],
)
def test_orderings_that_do_not_hold_on_return_are_left_out(body: str) -> None:
    source = f"import torch\n\ndef join(side, flag):\n    {body}\n"
    assert orders(source, "join").get("side", frozenset({"side"})) == {"side"}


def test_locals_never_appear_in_a_summary() -> None:
    source = """
    import torch

    def hop(side):
        local = torch.cuda.Stream()
        local.wait_stream(side)
        torch.cuda.current_stream().wait_stream(local)
    """
    facts = orders(source, "hop")
    assert facts == {"side": frozenset({"side", CURRENT})}  # through the local, not naming it


def test_re_recording_a_parameter_event_drops_what_it_captured() -> None:
    source = """
    import torch

    def mark(event, side):
        side.record_event(event)
    """
    facts = orders(source, "mark")
    assert facts["event:event"] == frozenset()
    assert facts["side"] == frozenset({"side", "event:event"})


def test_reads_of_parameters_on_a_side_stream_and_what_orders_them() -> None:
    source = """
    import torch

    def reduce(x, side, join):
        with torch.cuda.stream(side):
            total = x.sum()
        if join:
            torch.cuda.current_stream().wait_stream(side)
        return total
    """
    found = summary(source, "reduce")
    assert found is not None
    assert set(found.effects) == {Effect("x", "side", False, frozenset({"side"}))}  # joined on one path only


def test_writes_to_parameters_and_self_attributes_and_their_streams() -> None:
    source = """
    import torch

    class Loader:
        def fill(self, buf, fresh):
            with torch.cuda.stream(self.copy_stream):
                buf.copy_(fresh)
                self.staged = fresh.cuda(non_blocking=True)
            fresh = torch.zeros(4, device="cuda")
            fresh.add_(1)
    """
    found = summary(source, "Loader.fill")
    assert found is not None and found.params == ("buf", "fresh")
    assert set(found.effects) == {
        Effect("buf", "self.copy_stream", True, frozenset({"self.copy_stream"})),
        Effect("self.staged", "self.copy_stream", True, frozenset({"self.copy_stream"}), rebound=True),
    }  # `fresh` is rebound: its accesses are not the caller's


def test_functions_without_effects_and_coroutines_have_no_summary() -> None:
    source = """
    import torch

    def plain(x):
        return x * 2

    async def later(side):
        torch.cuda.current_stream().wait_stream(side)
    """
    assert summary(source, "plain") is None
    assert summary(source, "later") is None


def test_recursion_terminates() -> None:
    source = """
    import torch

    def ping(side, n):
        if n:
            pong(side, n - 1)
        torch.cuda.current_stream().wait_stream(side)

    def pong(side, n):
        ping(side, n)
    """
    assert orders(source, "ping")["side"] == frozenset({"side", CURRENT})


# ---- replay at call sites

CALLER = """
import torch

{helper}

def f(x, s):
    with torch.cuda.stream(s):
        y = x * 2
    {call}
    return y + 1
"""


def _reads_after_write(source: str) -> set[tuple[str, int, str, str]]:
    return {hazard for hazard in hazards(source) if hazard[0] == "READ_AFTER_WRITE"}


@pytest.mark.parametrize(
    ("helper", "call"),
    [
        (
            "def join(side, log):\n    log.info('join')\n    torch.cuda.current_stream().wait_stream(side)",
            "join(s, log)",
        ),
        (
            "def join(side):\n    inner(side)\n\ndef inner(side):\n    torch.cuda.current_stream().wait_stream(side)",
            "join(s)",
        ),
        ("def join(*, side):\n    torch.cuda.current_stream().wait_stream(side)", "join(side=s)"),
        ("def settle(n):\n    for _ in range(n):\n        pass\n    torch.cuda.synchronize()", "settle(3)"),
        ("def join(a, b):\n    a.wait_stream(b)", "join(torch.cuda.current_stream(), s)"),
        ("def join(a, b):\n    a.wait_stream(b)", "join(b=s, a=torch.cuda.current_stream())"),
        ('def join(side):\n    """Doc."""\n    torch.cuda.current_stream().wait_stream(side)', "join(s)"),
        ("def settle():\n    torch.cuda.synchronize()", "settle()"),
        ("def settle(e, side):\n    side.record_event(e)\n    e.wait()", "settle(torch.cuda.Event(), s)"),
    ],
)
def test_helpers_that_order_on_every_path_are_seen_at_the_call(helper: str, call: str) -> None:
    assert _reads_after_write(CALLER.format(helper=helper, call=call)) == set()


@pytest.mark.parametrize(
    ("helper", "call"),
    [
        ("def join(side):\n    torch.cuda.current_stream().wait_stream(side)", "join(*streams)"),
        ("def join(side=None):\n    torch.cuda.current_stream().wait_stream(side)", "join()"),
        (
            "def join(a, b, c):\n    c.wait_stream(b)\n    b.wait_stream(a)",
            "join(s, torch.cuda.Stream(), torch.cuda.current_stream())",
        ),
        ("def join(side, flag):\n    if flag:\n        torch.cuda.current_stream().wait_stream(side)", "join(s, True)"),
        ("def join(side):\n    return None\n    torch.cuda.current_stream().wait_stream(side)", "join(s)"),
        ("def join(side):\n    e = torch.cuda.Event()\n    e.wait()", "join(s)"),
        ("def other(side):\n    torch.cuda.current_stream().wait_stream(side)", "join(s)"),
    ],
)
def test_helpers_whose_ordering_does_not_reach_the_caller(helper: str, call: str) -> None:
    source = CALLER.format(helper=helper, call=call)
    line = textwrap.dedent(source).splitlines().index("    return y + 1") + 1
    assert _reads_after_write(source) == {("READ_AFTER_WRITE", line, "y", "s")}


def test_waits_made_in_order_chain_through_the_helper() -> None:
    source = CALLER.format(
        helper="def join(a, b, c):\n    b.wait_stream(a)\n    c.wait_stream(b)",
        call="join(s, torch.cuda.Stream(), torch.cuda.current_stream())",
    )
    assert _reads_after_write(source) == set()


RELOAD = """
import torch

copy_stream = torch.cuda.Stream()

def alloc(like, compute):
    {alloc}

def reload(src, dest):
    buf = alloc(src, {passed})
    with torch.cuda.stream(copy_stream):
        buf.copy_(src, non_blocking=True)
    buf.record_stream(copy_stream)
    dest.data = buf
    torch.cuda.current_stream().wait_stream(copy_stream)
"""

ALLOC_THEN_WAIT = "buf = torch.empty_like(like)\n    copy_stream.wait_stream(compute)\n    return buf"


def _reload_findings(alloc: str, passed: str) -> list[tuple[str, int]]:
    source = textwrap.dedent(RELOAD.format(alloc=alloc, passed=passed))
    return sorted((finding.code, finding.line) for finding in lint_source(source, "m.py"))


@pytest.mark.parametrize(
    ("alloc", "passed"),
    [
        (ALLOC_THEN_WAIT, "torch.cuda.current_stream()"),
        (ALLOC_THEN_WAIT, "compute=torch.cuda.current_stream()"),
        (ALLOC_THEN_WAIT.replace("wait_stream(compute)", "wait_stream(torch.cuda.current_stream())"), "None"),
    ],
)
def test_a_value_a_helper_made_before_ordering_another_stream_after_the_callers_is_ordered(
    alloc: str, passed: str
) -> None:
    """The helper allocates on the caller's stream, then makes the copy stream wait for it."""
    assert _reload_findings(alloc, passed) == []


@pytest.mark.parametrize(
    ("alloc", "passed"),
    [
        (
            "copy_stream.wait_stream(compute)\n    buf = torch.zeros_like(like)\n    return buf",
            "torch.cuda.current_stream()",
        ),
        (ALLOC_THEN_WAIT, "torch.cuda.Stream()"),
        (ALLOC_THEN_WAIT.replace("\n    copy", "\n    if like.dim():\n        copy"), "torch.cuda.current_stream()"),
    ],
)
def test_a_value_written_after_the_wait_or_not_ordered_on_every_path_is_flagged(alloc: str, passed: str) -> None:
    line = (
        textwrap.dedent(RELOAD.format(alloc=alloc, passed=passed))
        .splitlines()
        .index("        buf.copy_(src, non_blocking=True)")
    )
    assert _reload_findings(alloc, passed) == [("CSL101", line + 1)]


def test_a_helper_that_writes_its_argument_on_a_side_stream_makes_a_producer() -> None:
    source = """
    import torch

    def fill(buf, side):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            buf.copy_(torch.ones(4, device="cuda"))

    def use(s):
        buf = torch.empty(4, device="cuda")
        fill(buf, s)
        return buf.sum()

    def use_joined(s):
        buf = torch.empty(4, device="cuda")
        fill(buf, s)
        torch.cuda.current_stream().wait_stream(s)
        return buf.sum()
    """
    assert hazards(source) == {("READ_AFTER_WRITE", 12, "buf", "s")}


def test_a_helper_reading_its_argument_on_a_side_stream_is_checked_at_the_call() -> None:
    source = """
    import torch

    def reduce(x, side):
        with torch.cuda.stream(side):
            total = x.sum()
        return total

    def reduce_joined(x, side):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            total = x.sum()
        torch.cuda.current_stream().wait_stream(side)
        return total

    def f(s):
        x = torch.ones(4, device="cuda")
        total = reduce(x, s)
        x.zero_()
        return total

    def g(s):
        x = torch.ones(4, device="cuda")
        total = reduce_joined(x, s)
        x.zero_()
        return total
    """
    assert hazards(source) == {
        ("READ_AFTER_WRITE", 18, "x", CURRENT),  # the side stream reads x before it is written
        ("WRITE_AFTER_READ", 19, "x", "s"),  # and the overwrite may come before that read
        ("FREE_IN_USE", 7, "total", "side"),  # made on a side stream that never waits for the caller's
    }


def test_a_self_method_leaves_self_attributes_written() -> None:
    source = """
    import torch

    class Model:
        def _stage(self, batch):
            with torch.cuda.stream(self.copy_stream):
                self.staged = batch.cuda(non_blocking=True)

        def _use(self, batch):
            self._stage(batch)
            return self.staged * 2
    """
    assert hazards(source) == {
        ("READ_AFTER_WRITE", 11, "self.staged", "self.copy_stream"),
        ("WRITE_AFTER_READ", 7, "batch", "self.copy_stream"),  # `_use` never joins the copy of its batch
    }


REBINDING = """
import torch

class Optimizer:
    def _norm(self, grads):
        with torch.cuda.stream(self.norm_stream):
            self.norm = grads.norm()

    def step(self, grads):
        self.norm = grads.sum()
        self._norm(grads)
        {join}
        return self.norm * 2
"""


def test_a_self_method_that_rebinds_an_attribute_overwrites_nothing_of_the_callers() -> None:
    """The call drops the caller's `self.norm` for a new tensor made on the side stream: no race
    with the caller's earlier write, but the new tensor is still read before the join (and the
    side stream's read of `grads` is still pending when `step` returns to its caller)."""
    join = "torch.cuda.current_stream().wait_stream(self.norm_stream)"
    assert hazards(REBINDING.format(join=join)) == set()
    assert hazards(REBINDING.format(join="pass")) == {
        ("READ_AFTER_WRITE", 13, "self.norm", "self.norm_stream"),
        ("WRITE_AFTER_READ", 11, "grads", "self.norm_stream"),
    }


# ---- across methods

PREFETCHER = """
import torch

class Prefetcher:
    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        {init}

    def {producer}(self):
        batch = next(self.loader)
        with torch.cuda.stream(self.stream):
            self.next_batch = batch.cuda(non_blocking=True)
        {after_copy}

    def {consumer}(self):
        {wait}
        batch = self.next_batch
        self.{producer}()
        return batch * 2
"""


def prefetcher(**parts: str) -> str:
    defaults = {"init": "pass", "producer": "preload", "after_copy": "pass", "consumer": "next", "wait": "pass"}
    return PREFETCHER.format(**{**defaults, **parts})


def test_a_side_stream_producer_and_a_consumer_method_are_checked_together() -> None:
    assert hazards(prefetcher()) == {("READ_AFTER_WRITE", 20, "batch", "self.stream")}
    assert hazards(prefetcher(producer="_preload", init="self._preload()")) == {
        ("READ_AFTER_WRITE", 20, "batch", "self.stream")
    }


def test_the_message_names_the_producer() -> None:
    findings = lint_source(textwrap.dedent(prefetcher()), "m.py")
    assert [finding.code for finding in findings] == ["CSL102"]
    assert "side stream 'self.stream' in Prefetcher.preload()" in findings[0].message


def test_the_named_producer_does_not_depend_on_hash_order() -> None:
    """`next` is a producer too (its `self.preload()` call): the message names one of them, always the same."""
    script = (
        "import sys; from csan_lint.lint.engine import lint_source; "
        "print(lint_source(sys.stdin.read(), 'm.py')[0].message)"
    )
    messages = {
        subprocess.run(
            [sys.executable, "-c", script],
            input=textwrap.dedent(prefetcher()),
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(3)
    }
    assert len(messages) == 1 and "in Prefetcher.preload()" in messages.pop()


EVENT_LOADER = """
import torch

class Loader:
    def __init__(self):
        self.stream = torch.cuda.Stream()
        self.ready = torch.cuda.Event()

    def stage(self, batch):
        with torch.cuda.stream(self.stream):
            self.staged = batch.cuda(non_blocking=True)
            self.ready.record()

    def take(self):
        self.ready.wait()
        return self.staged * 2

    def take_joined(self):
        self._join()
        return self.staged * 2

    def _join(self):
        torch.cuda.current_stream().wait_stream(self.stream)

    def take_unordered(self):
        return self.staged * 2
"""


def test_events_on_self_and_joining_helpers_order_across_methods() -> None:
    assert hazards(EVENT_LOADER) == {("READ_AFTER_WRITE", 26, "self.staged", "self.stream")}


@pytest.mark.parametrize(
    "parts",
    [
        {"wait": "torch.cuda.current_stream().wait_stream(self.stream)"},
        {"wait": "self.stream.synchronize()"},
        {"after_copy": "torch.cuda.current_stream().wait_stream(self.stream)"},
        {"after_copy": "self.next_batch.record_stream(torch.cuda.current_stream()); torch.cuda.synchronize()"},
        {"consumer": "_next"},  # only the class's own code calls it: it may wait first
        {"producer": "_preload", "init": "pass", "consumer": "_next"},  # no public way to run either
    ],
)
def test_ordered_or_unreachable_producers_are_not_flagged(parts: dict[str, str]) -> None:
    assert hazards(prefetcher(**parts)) == set()


def test_a_side_stream_read_in_one_method_and_an_overwrite_in_another() -> None:
    source = """
    import torch

    class Head:
        def __init__(self, example):
            self.static_input = example.clone()
            self.side = torch.cuda.Stream()
            with torch.cuda.stream(self.side):
                self.sums = self.static_input.sum()

        def __call__(self, x):
            self.static_input.copy_(x)
    """
    assert ("WRITE_AFTER_READ", 12, "self.static_input", "self.side") in hazards(source)


# ---- across modules

HELPERS = """
import torch


def join(side):
    torch.cuda.current_stream().wait_stream(side)


def fill(buf, side):
    with torch.cuda.stream(side):
        buf.copy_(torch.ones(4, device="cuda"))
"""

TRAIN = """
import torch
{imports}


def step(x, s):
    with torch.cuda.stream(s):
        y = x * 2
    {call}
    return y + 1
"""


@pytest.mark.parametrize(
    ("imports", "call"),
    [
        ("from pkg.helpers import join", "join(s)"),
        ("import pkg.helpers as h", "h.join(s)"),
        ("from .helpers import join", "join(s)"),
        ("from . import helpers", "helpers.join(s)"),
    ],
)
def test_a_helper_imported_from_another_linted_module_is_followed(imports: str, call: str) -> None:
    package = PackageIndex.build([("src/pkg/helpers.py", HELPERS), ("src/pkg/train.py", "")])
    source = textwrap.dedent(TRAIN.format(imports=imports, call=call))
    assert [f.code for f in lint_source(source, "src/pkg/train.py", package=package) if f.code == "CSL102"] == []
    assert [f.code for f in lint_source(source, "src/pkg/train.py") if f.code == "CSL102"] == ["CSL102"]


def test_an_ambiguous_or_unlisted_module_is_not_followed() -> None:
    package = PackageIndex.build([("a/pkg/helpers.py", HELPERS), ("b/pkg/helpers.py", HELPERS)])
    source = textwrap.dedent(TRAIN.format(imports="from pkg.helpers import join", call="join(s)"))
    assert "CSL102" in {f.code for f in lint_source(source, "train.py", package=package)}
    package = PackageIndex.build([("pkg/helpers.py", "def join(side):\n    pass\n")])  # no ordering API
    assert package.sources == {}


@pytest.mark.parametrize(
    "context",
    ["torch.cuda.stream(side)", "get_accelerator().stream(side)", "torch.cuda.StreamContext(side)"],
)
def test_a_module_that_enters_a_stream_in_any_spelling_is_indexed(context: str) -> None:
    """Which modules have summaries follows the table's stream contexts: a helper that only
    enters a stream, spelled through DeepSpeed's accelerator, is followed like torch.cuda's."""
    helper = (
        "import torch\nfrom deepspeed.accelerator import get_accelerator\n\n\n"
        f"def scale_on(x, side):\n    with {context}:\n        x.mul_(2)\n"
    )
    package = PackageIndex.build([("pkg/comm.py", helper)])
    assert package.sources.keys() == {"pkg.comm"}
    train = "import torch\nfrom pkg.comm import scale_on\n\n\ndef step(side):\n"
    train += "    x = torch.ones(4, device='cuda')\n    scale_on(x, side)\n"
    assert [(f.code, f.line) for f in lint_source(train, "pkg/train.py", package=package)] == [("CSL101", 7)]


def test_module_names_and_the_index_pickles_without_parsed_modules() -> None:
    assert module_name("src/pkg/helpers.py") == "src.pkg.helpers"
    assert module_name("./pkg/__init__.py") == "pkg"
    package = PackageIndex.build([("pkg/helpers.py", HELPERS)])
    assert package.summary("pkg.helpers.join") is not None
    assert package.summary("pkg.helpers.missing") is None
    copy = pickle.loads(pickle.dumps(package))
    assert copy.sources == package.sources and copy.summary("helpers.join") == package.summary("pkg.helpers.join")


def test_a_call_of_an_imported_class_or_value_parses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = streamflow.module_helpers
    monkeypatch.setattr(streamflow, "module_helpers", lambda source: parsed.append(source) or real(source))
    package = PackageIndex.build([("pkg/helpers.py", HELPERS + "\n\nclass Buffer:\n    pass\n\nLIMIT = 4\n")])
    assert package.summary("pkg.helpers.Buffer") is None and package.summary("pkg.helpers.LIMIT") is None
    assert parsed == []
    assert package.summary("pkg.helpers.join") is not None and len(parsed) == 1


def test_a_worker_given_the_same_index_again_keeps_the_modules_it_parsed() -> None:
    """Every chunk of a run pickles the index: a worker must not parse a module once a chunk."""
    package = PackageIndex.build([("pkg/helpers.py", HELPERS)])
    first = pickle.loads(pickle.dumps(package))
    summary = first.summary("pkg.helpers.join")
    again = pickle.loads(pickle.dumps(package))
    assert again.summary("pkg.helpers.join") is summary  # not parsed and summarised anew
    other = pickle.loads(pickle.dumps(PackageIndex.build([("pkg/helpers.py", HELPERS + "\n# changed\n")])))
    assert other.summary("pkg.helpers.join") is not summary
    assert other.summary("pkg.helpers.join") == summary


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_runner_follows_imports_between_the_files_it_lints(
    tmp_path: Path, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("csan_lint.lint.shell.runner.PARALLEL_MIN_BYTES", 0)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text(HELPERS)
    train = TRAIN.format(imports="from pkg.helpers import join, fill", call="join(s)")
    train += "\n\ndef stage(s):\n    buf = torch.empty(4, device='cuda')\n    fill(buf, s)\n    return buf.sum()\n"
    (tmp_path / "pkg" / "train.py").write_text(train)
    monkeypatch.chdir(tmp_path)
    together = lint_paths(["."], Config(root=tmp_path), jobs=jobs)
    alone = lint_paths(["pkg/train.py"], Config(root=tmp_path), jobs=jobs)
    assert [(f.path, f.line) for f in together.findings if f.code == "CSL102"] == [("pkg/train.py", 16)]
    assert [(f.path, f.line) for f in alone.findings if f.code == "CSL102"] == [("pkg/train.py", 10)]


def test_writes_replayed_in_a_block_on_a_stream_chosen_by_if_else_are_judged_on_each_choice() -> None:
    """`fill(buf)` writes `buf` on `a` or `b`: on the `b` path nothing orders `a` after it, and
    neither choice waited for the stream that allocated `buf`."""
    source = """
    import torch

    def fill(buf):
        buf.copy_(torch.ones(4, device="cuda"))

    def f(a, b, flag):
        buf = torch.empty(4, device="cuda")
        if flag:
            stream = a
        else:
            stream = b
        with torch.cuda.stream(stream):
            fill(buf)
        a.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(a):
            y = buf * 2
        torch.cuda.current_stream().wait_stream(a)
        return y
    """
    assert hazards(source) == {("READ_AFTER_WRITE", 14, "buf", "<current>"), ("READ_AFTER_WRITE", 17, "buf", "b")}


def test_a_long_chain_of_calls_is_cut_short_not_a_crash() -> None:
    chain = "\n".join(f"def f{i}(s):\n    f{i + 1}(s)\n" for i in range(400))
    caller = "def g(x, s):\n    with torch.cuda.stream(s):\n        y = x * 2\n    {call}(s)\n    return y + 1\n"
    source = f"import torch\n\n{chain}\ndef f400(s):\n    torch.cuda.current_stream().wait_stream(s)\n\n{caller}"
    assert {h[0] for h in hazards(source.format(call="f398"))} == {"FREE_IN_USE"}  # the wait two calls down is seen
    assert "READ_AFTER_WRITE" in {h[0] for h in hazards(source.format(call="f0"))}  # four hundred down is not


ITEM_PICKED_BY_OWN_KEY = """
import torch

class Reducer:
    def __init__(self, n):
        self.streams = [torch.cuda.Stream() for _ in range(n)]

    def reduce(self, i):
        stream = self.streams[{key}]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.buf.mul_(2)
"""


@pytest.mark.parametrize(("key", "named"), [("i % len(self.streams)", False), ("0", True)])
def test_a_stream_picked_by_a_key_of_the_callees_own_is_no_name_of_the_callers(key: str, named: bool) -> None:
    """`self.streams[i % n]` names `i`, the callee's: its summary keeps no effect on it (the
    caller cannot tell which item it is, nor whether its own wait reached it); `self.streams[0]`
    is the same stream at the call."""
    found = summary(ITEM_PICKED_BY_OWN_KEY.format(key=key), "Reducer.reduce")
    streams = {effect.stream for effect in found.effects} if found is not None else set()
    assert ("self.streams[0]" in streams) is named
    assert not any("i %" in stream for stream in streams)
