"""Where a tensor's memory lives (lint/devices.py), and what both interpreters do with it: a
non-blocking copy to where host memory lives is a download (CSL301), a branch on which a tensor
is on the host has no device accesses of it, and rebinding `.data` drops device memory only
where the new value is not the same tensor moved."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from csan_lint.lint.analysis.assumptions import REBOUND_DATA_RELEASES, Assumptions
from csan_lint.lint.devices import Place, place_of_device, place_of_result, placed_by_default
from csan_lint.lint.engine import lint_source
from csan_lint.lint.names import ImportTable

REBOUND = Assumptions(on=frozenset({REBOUND_DATA_RELEASES}))


def findings(source: str, assumptions: Assumptions | None = None) -> list[tuple[str, int]]:
    found = lint_source(textwrap.dedent(source), "m.py", assumptions=assumptions or Assumptions())
    return sorted((f.code, f.line) for f in found)


def _imports() -> ImportTable:
    imports = ImportTable()
    [statement] = cst.parse_module("import torch\n").body
    assert isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Import)
    imports.add(statement.body[0])
    return imports


HOST_NAMES = {"h": Place.HOST, "d": Place.DEVICE}


@pytest.mark.parametrize(
    ("call", "place"),
    [
        ("torch.zeros(4)", Place.HOST),
        ("torch.tensor(0.0)", Place.HOST),
        ("torch.tensor(d)", Place.DEVICE),  # a tensor's data stays where it lives
        ("torch.as_tensor([1, 2])", Place.HOST),
        ("torch.zeros(4, device='cuda')", Place.DEVICE),
        ("torch.zeros(4, device=torch.device('cpu'))", Place.HOST),
        ("torch.empty(4, pin_memory=True)", Place.HOST),
        ("torch.zeros(4, device=x.device)", None),
        ("torch.zeros(4, device=h.device)", Place.HOST),
        ("torch.empty_like(d)", Place.DEVICE),
        ("torch.empty_like(x)", None),
        ("torch.empty_like(d, device='cpu')", Place.HOST),
        ("x.cpu()", Place.HOST),
        ("x.cuda()", Place.DEVICE),
        ("x.pin_memory()", Place.HOST),
        ("x.to('cuda:1')", Place.DEVICE),
        ("x.to(0)", Place.DEVICE),
        ("x.to(h.device, non_blocking=True)", Place.HOST),
        ("x.to(h)", Place.HOST),
        ("x.to(torch.float16)", None),
        ("h.to(torch.float16)", Place.HOST),  # a cast stays where its receiver lives
        ("d.to(x.dtype)", Place.DEVICE),
        ("h.to(torch.float16, device='cuda')", Place.DEVICE),
        ("x.to(device=d.device)", Place.DEVICE),
        ("x.mul(2)", None),
        ("f(x)", None),
    ],
)
def test_the_place_of_a_calls_result(call: str, place: Place | None) -> None:
    expr = cst.parse_expression(call)
    assert isinstance(expr, cst.Call)
    assert place_of_result(expr, _imports(), HOST_NAMES.get, Place.HOST) is place


@pytest.mark.parametrize(
    ("call", "place", "by_default"),
    [
        ("torch.zeros(4)", Place.DEVICE, True),
        ("torch.arange(n)", Place.DEVICE, True),
        ("torch.tensor([1, 2])", Place.DEVICE, True),
        ("torch.zeros(4, device='cpu')", Place.HOST, False),
        ("torch.empty(4, pin_memory=True)", Place.HOST, False),
        ("torch.empty_like(h)", Place.HOST, False),
        ("x.cpu()", Place.HOST, False),
    ],
)
def test_a_factory_that_names_no_device_allocates_on_the_default_one(call: str, place: Place, by_default: bool) -> None:
    """Under `torch.set_default_device("cuda")` (`factories-allocate-on-the-device`) only the
    factories that name no device, nor data that has one, move to the GPU."""
    expr = cst.parse_expression(call)
    assert isinstance(expr, cst.Call)
    assert place_of_result(expr, _imports(), HOST_NAMES.get, Place.DEVICE) is place
    assert placed_by_default(expr, _imports()) is by_default


@pytest.mark.parametrize(
    ("device", "place"),
    [("'cpu'", Place.HOST), ("'cuda'", Place.DEVICE), ("'xpu'", None), ("d.device", Place.DEVICE), ("dev", None)],
)
def test_the_place_a_device_names(device: str, place: Place | None) -> None:
    assert place_of_device(cst.parse_expression(device), _imports(), HOST_NAMES.get) is place


NORM = """
import torch

def total_norm(grads, other):
    total = torch.tensor(0.0)
    for g in grads:
        total = total.to(g.device) + g.norm()
    rest = other.norm().to({destination}, non_blocking=True)
    {sync}
    return torch.add(rest, total)
"""


def test_a_non_blocking_copy_to_where_host_memory_lives_is_read_before_it_lands() -> None:
    """`total` is a host tensor on the path where the loop runs no pass: the copy to
    `total.device` may be a download, and the host reads its result at once."""
    assert findings(NORM.format(destination="total.device", sync="")) == [("CSL301", 10)]


@pytest.mark.parametrize(
    ("destination", "sync"),
    [("total.device", "torch.cuda.current_stream().synchronize()"), ("other.device", ""), ("g.device", "")],
)
def test_a_copy_waited_for_or_to_where_no_host_memory_lives_is_not(destination: str, sync: str) -> None:
    assert findings(NORM.format(destination=destination, sync=sync)) == []


def test_a_download_passed_straight_to_an_operator_is_read_at_once() -> None:
    source = """
    import torch

    def bump(x):
        return torch.add(x.to("cpu", non_blocking=True), 1)
    """
    assert findings(source) == [("CSL301", 5)]


def test_an_operator_chosen_at_run_time_reads_its_operands_on_the_host() -> None:
    """`op = torch.maximum if inf else torch.add`: a call of `op` is a call of a torch operator."""
    source = """
    import torch

    def combine(x, inf):
        op = torch.maximum if inf else torch.add
        host = x.to("cpu", non_blocking=True)
        return op(host, 1)
    """
    assert findings(source) == [("CSL301", 7)]


OFFLOAD = """
import torch

copy_stream = torch.cuda.Stream()
copied = torch.cuda.Event()

def offload(src, dest):
    with torch.cuda.stream(copy_stream):
        dest.copy_(src, non_blocking=True)
        {record}
        src.data = {value}
    copied.record(copy_stream)
"""
"""The caller waits on `copied` (its writes, left pending at return, are CSL102's: not these tests')."""


def releases(source: str) -> list[tuple[str, int]]:
    """Under rebound-data-releases-callers-memory: `src`'s memory is the caller's."""
    return [finding for finding in findings(source, REBOUND) if finding[0] == "CSL201"]


def test_the_callers_memory_is_not_judged_by_default() -> None:
    assert [finding for finding in findings(OFFLOAD.format(record="", value="dest")) if finding[0] == "CSL201"] == []


def test_rebinding_data_drops_memory_a_side_stream_still_reads() -> None:
    assert releases(OFFLOAD.format(record="", value="dest")) == [("CSL201", 9)]


@pytest.mark.parametrize(
    "record",
    [
        "src.record_stream(copy_stream)",
        'if src.device.type != "cpu":\n            src.record_stream(copy_stream)',
        "if src.is_cuda:\n            src.record_stream(copy_stream)",
        "if not src.is_cpu:\n            src.record_stream(copy_stream)",
    ],
)
def test_a_record_on_every_path_where_the_memory_is_on_the_device_protects_it(record: str) -> None:
    """Where the test says `src` lives on the host, it has no device memory to protect."""
    assert releases(OFFLOAD.format(record=record, value="dest")) == []


@pytest.mark.parametrize("value", ["src.to(dest.device)", "src.cuda()", "src.data.to('cuda', non_blocking=True)"])
def test_moving_a_tensor_to_the_device_drops_no_device_memory(value: str) -> None:
    """The result is the tensor itself where it is there already, or a copy of host memory."""
    assert releases(OFFLOAD.format(record="", value=value)) == []


def test_moving_a_tensor_to_the_host_drops_its_device_memory() -> None:
    """Not waiting for it (a blocking `.cpu()` would make the host wait for the copy stream):
    the download itself reads the memory it drops."""
    assert releases(OFFLOAD.format(record="", value='src.to("cpu", non_blocking=True)')) == [("CSL201", 11)]


def test_the_release_rests_on_its_assumption() -> None:
    source = textwrap.dedent(OFFLOAD.format(record="", value="dest"))
    [finding] = [finding for finding in lint_source(source, "m.py", assumptions=REBOUND) if finding.code == "CSL201"]
    assert "rebound-data-releases-callers-memory" in finding.assumptions


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (  # a copy to a device the code does not name, then pinned: it was a download, read now
            """
            import torch

            def f(x, dev):
                return x.to(device=dev, non_blocking=True).pin_memory()
            """,
            [("CSL301", 5)],
        ),
        (  # the same through a name
            """
            import torch

            def f(x, dev):
                y = x.to(dev, non_blocking=True)
                return y.pin_memory()
            """,
            [("CSL301", 6)],
        ),
        (  # the copy read into another buffer, as DeepSpeed's offloaded gradients are
            """
            import torch

            def f(x, dst, dev):
                dst.copy_(x.to(dtype=torch.float32, device=dev, non_blocking=True).pin_memory())
            """,
            [("CSL301", 5)],
        ),
        (  # synchronized before: done
            """
            import torch

            def f(x, dev):
                y = x.to(dev, non_blocking=True)
                torch.cuda.synchronize()
                return y.pin_memory()
            """,
            [],
        ),
        (  # nothing says where it went: an upload as likely as a download, no finding
            """
            import torch

            def f(x, dev):
                y = x.to(dev, non_blocking=True)
                z = y * 2
                return y.sum(), z
            """,
            [],
        ),
        (  # rebound before the host-only method: another tensor
            """
            import torch

            def f(x, dev):
                y = x.to(dev, non_blocking=True)
                y = torch.zeros(4)
                return y.pin_memory()
            """,
            [],
        ),
    ],
)
def test_a_method_only_host_tensors_have_places_a_copy_of_unknown_direction(source: str, expected: list) -> None:
    assert findings(source) == expected


@pytest.mark.parametrize(
    ("call", "used"),
    [
        ("torch.full((1, 4), n, device='cuda')", set()),  # a size and a fill value
        ("torch.zeros(n)", set()),
        ("torch.tensor(n)", set()),  # Python data
        ("torch.relu(n)", {"n"}),
        ("torch.zeros_like(n)", {"n"}),  # shaped like a tensor
    ],
)
def test_a_factorys_arguments_are_no_tensors_but_an_ops_are(call: str, used: set[str]) -> None:
    from csan_lint.lint.scan import used_as_tensors

    [function] = cst.parse_module(f"def f(n):\n    y = {call}\n").body
    assert isinstance(function, cst.FunctionDef)
    assert used_as_tensors(function.body, _imports()) == used
