"""Resolving torch.cuda names through every import spelling, from the module's own imports."""

from __future__ import annotations

import libcst as cst
import pytest

from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.names import ImportTable, dotted_name


def _table(imports: str, spellings: Spellings = NO_SPELLINGS) -> ImportTable:
    table = ImportTable(spellings)
    for line in cst.parse_module(imports).body:
        assert isinstance(line, cst.SimpleStatementLine)
        for statement in line.body:
            assert isinstance(statement, (cst.Import, cst.ImportFrom, cst.Assign))
            table.add(statement)
    return table


_DEEPSPEED = "from deepspeed.accelerator import get_accelerator"


def _resolve(imports: str, expression: str) -> str | None:
    return _table(imports).qualified(cst.parse_expression(expression))


@pytest.mark.parametrize(
    ("imports", "expression", "expected"),
    [
        ("import torch", "torch.cuda.stream", "torch.cuda.stream"),
        ("import torch", "torch.cuda.Stream", "torch.cuda.Stream"),
        ("import torch", "torch.cuda.StreamContext", "torch.cuda.StreamContext"),
        ("import torch", "torch.cuda.Event", "torch.cuda.Event"),
        ("import torch.cuda", "torch.cuda.current_stream", "torch.cuda.current_stream"),
        ("import torch.cuda as tc", "tc.default_stream", "torch.cuda.default_stream"),
        ("import torch.cuda as tc", "tc.synchronize", "torch.cuda.synchronize"),
        ("from torch.cuda import stream as s_ctx, Stream", "s_ctx", "torch.cuda.stream"),
        ("from torch.cuda import stream as s_ctx, Stream", "Stream", "torch.cuda.Stream"),
        ("from torch import cuda", "cuda.Event", "torch.cuda.Event"),
        ("from torch.cuda.streams import Stream", "Stream", "torch.cuda.Stream"),
        ("import torch as th", "th.cuda.stream", "torch.cuda.stream"),
        ("import os", "state._device_handle.stream", "torch.cuda.stream"),
        ("import os", "self.device_module.Event", "torch.cuda.Event"),
        ("import os", "device_handle.current_stream", "torch.cuda.current_stream"),
        ("import torch", "torch.Stream", "torch.cuda.Stream"),
        ("import torch", "torch.Event", "torch.cuda.Event"),
        ("from torch import Stream, Event as E", "E", "torch.cuda.Event"),
        ("import torch", "torch.accelerator.current_stream", "torch.cuda.current_stream"),
        ("import torch", "torch.accelerator.set_stream", "torch.cuda.set_stream"),
        ("from torch import accelerator as acc", "acc.synchronize", "torch.cuda.synchronize"),
        ("import torch", "torch.accelerator.Graph", "torch.cuda.CUDAGraph"),
        ("import torch", "torch.cuda.graphs.graph", "torch.cuda.graph"),
        ("import torch", "torch.get_device_module().Stream", "torch.cuda.Stream"),
        (_DEEPSPEED, "get_accelerator().stream", "torch.cuda.stream"),
        (_DEEPSPEED, "get_accelerator().Event", "torch.cuda.Event"),
        (_DEEPSPEED, "get_accelerator().capture_to_graph", "torch.cuda.graph"),
        (f"{_DEEPSPEED}\naccel = get_accelerator()", "accel.current_stream", "torch.cuda.current_stream"),
        (f"{_DEEPSPEED}\nself.acc = get_accelerator()", "self.acc.synchronize", "torch.cuda.synchronize"),
        (
            "import torch\nself.m = getattr(torch, device.type) if ok else torch.cuda",
            "self.m.stream",
            "torch.cuda.stream",
        ),
        ("import torch\ndev = torch.xpu", "dev.current_stream", "torch.cuda.current_stream"),
        ("import torch", "torch.npu.Stream", "torch.cuda.Stream"),
        ("import torch\nc = torch.get_device_module(d).stream if ok else torch.cuda.stream", "c", "torch.cuda.stream"),
        ("import torch\nself._ctx = NoOpStream\nself._ctx = torch.cuda.stream", "self._ctx", "torch.cuda.stream"),
    ],
)
def test_spellings(imports: str, expression: str, expected: str) -> None:
    assert _resolve(imports, expression) == expected


@pytest.mark.parametrize(
    ("imports", "expression"),
    [
        ("import numpy", "torch.cuda.stream"),
        ("from mylib import stream", "torch.cuda.stream"),
        ("from . import cuda", "cuda.stream"),
        ("from torch.cuda import *", "stream"),
        ("import torch", "streams[0]"),
        ("import torch", "f().stream"),
        ("import os", "self.handle.stream"),
        ("import os", "my_device_handles.stream"),
        ("from mylib import get_accelerator", "get_accelerator().stream"),
        (f"{_DEEPSPEED}\naccel = make()", "accel.stream"),
        (_DEEPSPEED, "get_accelerator().pin_memory"),  # DeepSpeed's pins its argument: no torch.cuda API
        (f"{_DEEPSPEED}\naccel = get_accelerator()", "accel.device_name"),
        ("import torch\ndtype = getattr(torch, name)", "dtype.stream"),
        ("import torch\nctx = torch.cuda.stream\nctx = torch.cuda.Event", "ctx"),
    ],
)
def test_not_resolved(imports: str, expression: str) -> None:
    assert _resolve(imports, expression) is None


def test_project_wrappers_mean_their_torch_spelling() -> None:
    spellings = Spellings(
        stream_contexts=("pkg.cuda_utils.on_stream", "self._stream_context"),
        current_stream=("pkg.cuda_utils.active_stream",),
        stream_factories=("pkg.cuda_utils.new_stream",),
        event_factories=("pkg.cuda_utils.new_event",),
    )
    table = _table("from pkg import cuda_utils\nfrom pkg.cuda_utils import on_stream as on", spellings)
    expressions = (
        "on", "cuda_utils.active_stream", "cuda_utils.new_stream", "cuda_utils.new_event",
        "self._stream_context", "cuda_utils.other",
    )  # fmt: skip
    resolved = {expression: table.qualified(cst.parse_expression(expression)) for expression in expressions}
    relative = _table("from .cuda_utils import on_stream", spellings)  # relative imports are not resolved
    assert [relative.qualified(cst.parse_expression(name)) for name in ("on_stream", "utils.on_stream")] == [
        "torch.cuda.stream",
        None,
    ]
    assert resolved == {
        "on": "torch.cuda.stream",
        "cuda_utils.active_stream": "torch.cuda.current_stream",
        "cuda_utils.new_stream": "torch.cuda.Stream",
        "cuda_utils.new_event": "torch.cuda.Event",
        "self._stream_context": "torch.cuda.stream",
        "cuda_utils.other": "pkg.cuda_utils.other",
    }


def test_names_assigned_a_stream_anywhere_in_the_module() -> None:
    table = _table("import torch\nself.s1 = torch.Stream()\nself.s0 = torch.accelerator.current_stream()\nn = f()")
    assert [table.binds_stream(key) for key in ("self.s1", "self.s0", "n", "s1")] == [True, True, False, False]


def test_conflicting_bindings_resolve_to_nothing() -> None:
    table = _table("from torch.cuda import stream\nfrom mylib.cuda import stream")
    assert table.qualified(cst.parse_expression("stream")) is None


def test_same_binding_twice_is_not_a_conflict() -> None:
    table = _table("import torch\nimport torch.cuda")
    assert table.qualified(cst.parse_expression("torch.cuda.Event")) == "torch.cuda.Event"


@pytest.mark.parametrize(
    ("imports", "expected"),
    [
        ("import os", False),
        ("from mylib import torch_utils", False),
        ("import torch", True),
        ("from torch import cuda", True),
    ],
)
def test_imports_torch(imports: str, expected: bool) -> None:
    assert _table(imports).imports_torch is expected


def test_dotted_name() -> None:
    assert dotted_name(cst.parse_expression("self.copy_stream")) == "self.copy_stream"
    assert dotted_name(cst.parse_expression("a[0].b")) is None
