"""The table of the stream API (lint/analysis/api.py): each spelling, however imported or
reached, means one typed operation; no two entries disagree; and what is generated from the
table (the prefilter, `--confirm`'s words, the settings) knows every spelling in it."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis import api
from csan_lint.lint.analysis.api import Direction, Kind, Operation, Receiver
from csan_lint.lint.engine import lint_source
from csan_lint.lint.model import Spellings
from csan_lint.lint.models import EFFECTS
from csan_lint.lint.names import ImportTable
from csan_lint.lint.recognize import stream_code_lines
from csan_lint.lint.shell.config import SPELLING_KEYS
from csan_lint.lint.shell.files import might_have_findings

_PROJECT = Spellings(
    stream_contexts=("pkg.cuda_utils.on_stream",),
    current_stream=("pkg.cuda_utils.active_stream",),
    stream_factories=("pkg.cuda_utils.new_stream",),
    event_factories=("pkg.cuda_utils.new_event",),
)
_IMPORTS = """\
import torch
import torch.cuda as tc
from torch.cuda import Event as CudaEvent
from deepspeed.accelerator import get_accelerator
from pkg import cuda_utils
accel = get_accelerator()
"""


def _operation(expression: str) -> Operation | None:
    """What calling `expression` does, under `_IMPORTS` and the project's `_PROJECT` settings."""
    table = ImportTable(_PROJECT)
    for line in cst.parse_module(_IMPORTS).body:
        assert isinstance(line, cst.SimpleStatementLine)
        for statement in line.body:
            assert isinstance(statement, (cst.Import, cst.ImportFrom, cst.Assign))
            table.add(statement)
    return api.operation(table.qualified(cst.parse_expression(expression)))


@pytest.mark.parametrize(
    ("expression", "kind", "on"),
    [
        ("torch.cuda.Stream", Kind.STREAM_CREATE, None),
        ("torch.cuda.ExternalStream", Kind.STREAM_CREATE, None),
        ("torch.Stream", Kind.STREAM_CREATE, None),
        ("accel.Stream", Kind.STREAM_CREATE, None),
        ("cuda_utils.new_stream", Kind.STREAM_CREATE, None),
        ("torch.cuda.Event", Kind.EVENT_CREATE, None),
        ("torch.Event", Kind.EVENT_CREATE, None),
        ("CudaEvent", Kind.EVENT_CREATE, None),
        ("get_accelerator().Event", Kind.EVENT_CREATE, None),
        ("cuda_utils.new_event", Kind.EVENT_CREATE, None),
        ("torch.cuda.current_stream", Kind.CURRENT_STREAM, None),
        ("torch.accelerator.current_stream", Kind.CURRENT_STREAM, None),
        ("tc.current_stream", Kind.CURRENT_STREAM, None),
        ("cuda_utils.active_stream", Kind.CURRENT_STREAM, None),
        ("self._device_handle.current_stream", Kind.CURRENT_STREAM, None),
        ("torch.cuda.default_stream", Kind.DEFAULT_STREAM, None),
        ("torch.cuda.stream", Kind.ENTER_STREAM, None),
        ("torch.cuda.StreamContext", Kind.ENTER_STREAM, None),
        ("torch.cuda.streams.StreamContext", Kind.ENTER_STREAM, None),
        ("accel.stream", Kind.ENTER_STREAM, None),
        ("cuda_utils.on_stream", Kind.ENTER_STREAM, None),
        ("torch.cuda.set_stream", Kind.SET_STREAM, None),
        ("torch.accelerator.set_stream", Kind.SET_STREAM, None),
        ("torch.cuda.synchronize", Kind.HOST_SYNC, api.On.DEVICE),
        ("torch.accelerator.synchronize", Kind.HOST_SYNC, api.On.DEVICE),
        ("get_accelerator().synchronize", Kind.HOST_SYNC, api.On.DEVICE),
        ("torch.distributed.barrier", Kind.HOST_SYNC, api.On.CURRENT),
        ("torch.cuda.graph", Kind.CAPTURE, None),
        ("accel.capture_to_graph", Kind.CAPTURE, None),
        ("torch.cuda.CUDAGraph", Kind.GRAPH_CREATE, None),
        ("torch.cuda.graphs.CUDAGraph", Kind.GRAPH_CREATE, None),
        ("torch.accelerator.Graph", Kind.GRAPH_CREATE, None),
        ("accel.create_graph", Kind.GRAPH_CREATE, None),
        ("torch.cuda.make_graphed_callables", Kind.GRAPHED_CALLABLES, None),
        ("torch.distributed.all_reduce", Kind.LAUNCH, None),
        ("torch.empty_like", Kind.ALLOC, None),
    ],
)
def test_every_spelling_of_a_callable_means_its_operation(expression: str, kind: Kind, on: api.On | None) -> None:
    op = _operation(expression)
    assert op is not None and (op.kind, op.on) == (kind, on)


@pytest.mark.parametrize(
    "expression", ["accel.pin_memory", "accel.make_graphed_callables", "torch.cuda.is_available", "torch.add"]
)
def test_other_callables_mean_no_operation(expression: str) -> None:
    """An accelerator's `pin_memory(t)` is no namesake of torch.cuda's; device queries order nothing."""
    assert _operation(expression) is None


@pytest.mark.parametrize(
    ("method", "operation", "receiver"),
    [
        ("wait_stream", Operation(Kind.WAIT, api.On.STREAM), Receiver.STREAM),
        ("wait_event", Operation(Kind.WAIT, api.On.EVENT), Receiver.STREAM),
        ("wait", Operation(Kind.WAIT, api.On.EVENT), Receiver.EVENT),
        ("record_event", Operation(Kind.RECORD, api.On.EVENT), Receiver.STREAM),
        ("record", Operation(Kind.RECORD, api.On.EVENT), Receiver.EVENT),
        ("synchronize", Operation(Kind.HOST_SYNC, api.On.RECEIVER), Receiver.STREAM_OR_EVENT),
        ("query", Operation(Kind.QUERY, api.On.RECEIVER), Receiver.STREAM_OR_EVENT),
        ("capture_begin", Operation(Kind.CAPTURE_BEGIN), Receiver.GRAPH),
        ("capture_end", Operation(Kind.CAPTURE_END), Receiver.GRAPH),
        ("replay", Operation(Kind.REPLAY), Receiver.GRAPH),
        ("record_stream", Operation(Kind.RECORD_STREAM, api.On.STREAM), Receiver.TENSOR),
        ("copy_", Operation(Kind.COPY, direction=Direction.EITHER, in_place=True), Receiver.TENSOR),
        ("to", Operation(Kind.COPY, direction=Direction.EITHER), Receiver.TENSOR),
        ("cuda", Operation(Kind.COPY, direction=Direction.TO_DEVICE), Receiver.TENSOR),
        ("cpu", Operation(Kind.COPY, direction=Direction.TO_HOST, blocking=True), Receiver.TENSOR),
        ("pin_memory", Operation(Kind.COPY, direction=Direction.TO_PINNED, blocking=True), Receiver.TENSOR),
        ("item", Operation(Kind.HOST_SYNC, api.On.CURRENT), Receiver.TENSOR),
        ("tolist", Operation(Kind.HOST_SYNC, api.On.CURRENT), Receiver.TENSOR),
        ("new_empty", Operation(Kind.ALLOC), Receiver.TENSOR),
        ("resize_", Operation(Kind.FREE), Receiver.STORAGE),
    ],
)
def test_every_method_means_one_operation(method: str, operation: Operation, receiver: Receiver) -> None:
    entry = api.method(method)
    assert entry is not None and (entry.op, entry.receiver) == (operation, receiver)
    assert api.method_op(method) == (operation, receiver is Receiver.STREAM)


def test_a_helper_named_after_record_stream_records_one() -> None:
    assert api.records_stream("_no_dispatch_record_stream")
    assert not api.records_stream("record_streams_used")


def test_no_two_entries_conflict() -> None:
    """One entry per name, per method name and per accelerator spelling; every alias lands on an
    entry; every setting means an operation some entry performs."""
    names = [entry.name for entry in api.FUNCTIONS]
    assert len(names) == len(set(names))
    methods = [entry.name for entry in api.METHODS]
    assert len(methods) == len(set(methods))
    spelled: dict[str, str] = {}
    for entry in api.FUNCTIONS:
        if entry.accelerator is not None:
            for spelling in (entry.accelerator, entry.name.rpartition(".")[2]):
                assert spelled.setdefault(spelling, entry.name) == entry.name
                assert api.accelerator_member(spelling) == entry.name
    assert set(api.SPELLING_NAMES.values()) <= set(names)
    assert set(api.SPELLING_MODULES.values()) == {"torch.cuda"}
    assert {api.canonical_of(kind) for kind in api.SETTINGS.values()} <= set(names)
    assert set(SPELLING_KEYS.values()) == set(api.SETTINGS) == set(Spellings.__dataclass_fields__) - {"models"}
    modelled = {api.canonical_of(*operation) for values in EFFECTS.values() for operation in values.values()}
    assert len(modelled) == sum(map(len, EFFECTS.values())) and modelled <= set(names)


def test_every_kind_has_a_spelling() -> None:
    performed = {entry.op.kind for entry in (*api.FUNCTIONS, *api.METHODS)}
    assert performed == set(Kind)


def test_copies_say_where_and_whether_they_block() -> None:
    for entry in (*api.FUNCTIONS, *api.METHODS):
        is_copy = entry.op.kind is Kind.COPY
        assert (entry.op.direction is not None) == is_copy, entry.name


@pytest.mark.parametrize(
    "entry", [entry for entry in api.FUNCTIONS if entry.marks_stream_code], ids=lambda entry: entry.name
)
def test_every_stream_code_spelling_passes_the_prefilter(entry: api.Function) -> None:
    """The prefilter and `--confirm`'s words are generated from the table: each callable that
    marks stream code, called as torch.cuda spells it, keeps the file."""
    leaf = entry.name.rpartition(".")[2]
    source = f"import torch\n\n\ndef f(s):\n    return torch.cuda.{leaf}(s)\n"
    assert might_have_findings(source)
    assert stream_code_lines(source)


@pytest.mark.parametrize(
    "entry", [entry for entry in api.METHODS if entry.marks_stream_code], ids=lambda entry: entry.name
)
def test_every_stream_code_method_is_in_confirms_words(entry: api.Method) -> None:
    """A method other objects share counts on a receiver named like an event or a stream."""
    receiver = "evt" if entry.shared else "h"
    source = f"def f(x, {receiver}):\n    {receiver}.{entry.name}(x)\n"
    assert stream_code_lines(source)


def test_project_spellings_pass_the_prefilter_by_their_last_name() -> None:
    source = "from pkg.cuda_utils import new_event\n\n\ndef f():\n    return new_event()\n"
    assert not might_have_findings(source)
    assert might_have_findings(source, _PROJECT.leaves())


def test_a_device_module_looked_up_by_name_is_torch_cuda() -> None:
    """`getattr(torch, self.device).stream(s)` (torchao's CPU offload optimizer): device-generic
    code picks the module at run time; on a CUDA device it is `torch.cuda`."""
    source = textwrap.dedent(
        """
        import torch

        def step(self, x):
            with getattr(torch, self.device).stream(self.stream):
                y = x * 2
            return y
        """
    )
    assert might_have_findings(source, frozenset())
    assert [(f.code, f.line) for f in lint_source(source, "m.py")] == [("CSL102", 7)]
