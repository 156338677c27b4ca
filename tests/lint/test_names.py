"""Resolving torch.cuda names through every import spelling, from the module's own imports."""

from __future__ import annotations

import libcst as cst
import pytest

from csan_lint.lint.names import ImportTable, dotted_name


def _table(imports: str) -> ImportTable:
    table = ImportTable()
    for line in cst.parse_module(imports).body:
        assert isinstance(line, cst.SimpleStatementLine)
        for statement in line.body:
            assert isinstance(statement, (cst.Import, cst.ImportFrom))
            table.add(statement)
    return table


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
    ],
)
def test_not_resolved(imports: str, expression: str) -> None:
    assert _resolve(imports, expression) is None


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
