"""Engine holes of issue 14 end to end: `pytest --csan` on the emulated device, in a subprocess,
on GPU tests written the way users write them; the report file says which test raced what."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

GPU_TESTS = """
import torch


def test_a_write_after_a_racing_write_races_the_earlier_read():
    x = torch.ones(64, device="cuda")
    torch.cuda.synchronize()
    s1, s2, s3 = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(s1):
        total = x.sum()
    with torch.cuda.stream(s2):
        x.mul_(2)  # races the sum
    s3.wait_stream(s2)
    with torch.cuda.stream(s3):
        x.add_(1)  # after mul_, still not after the sum
    torch.cuda.synchronize()


def test_column_blocks_blended_on_two_streams():
    m = torch.zeros(8, 6, device="cuda")
    main, left, right = torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()
    left.wait_stream(main)
    right.wait_stream(main)
    with torch.cuda.stream(left):
        m[:, :3].add_(1)
    with torch.cuda.stream(right):
        m[:, 3:].mul_(2)
    main.wait_stream(left)
    main.wait_stream(right)
    m.sum()


def test_even_and_odd_elements_on_two_streams():
    x = torch.zeros(64, device="cuda")
    main, even, odd = torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()
    even.wait_stream(main)
    odd.wait_stream(main)
    with torch.cuda.stream(even):
        x[0::2].fill_(1)
    with torch.cuda.stream(odd):
        x[1::2].fill_(2)
    main.wait_stream(even)
    main.wait_stream(odd)
    x.sum()


def test_a_column_block_read_while_a_side_stream_writes_another_block_overlapping_it():
    m = torch.zeros(8, 6, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        m[:, 2:].mul_(2)
    m[:, :3].sum()  # column 2 is shared: races
    torch.cuda.current_stream().wait_stream(side)


def test_a_side_stream_that_waited_before_the_allocation_fills_the_tensor():
    side = torch.cuda.Stream()
    torch.ones(4, device="cuda")  # earlier work on the current stream
    side.wait_stream(torch.cuda.current_stream())
    x = torch.empty(16, device="cuda")  # no launch between the wait and the allocation
    with torch.cuda.stream(side):
        x.fill_(1)
    torch.cuda.current_stream().wait_stream(side)


def test_a_side_stream_that_never_waited_fills_a_reused_block():
    side = torch.cuda.Stream()
    torch.ones(4, device="cuda")
    x = torch.empty(16, device="cuda")
    with torch.cuda.stream(side):
        x.fill_(1)
    torch.cuda.current_stream().wait_stream(side)
"""


def test_engine_holes_end_to_end(pytester: pytest.Pytester):
    pytester.makepyfile(test_gpu=GPU_TESTS)
    path = pytester.path / "csan.jsonl"
    result = pytester.runpytest_subprocess("--csan", "--csan-device", "emulated", f"--csan-report={path}")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    races: dict[str, list[tuple[str, str, str]]] = {}
    for record in records:
        if record["type"] == "test-start":
            races[record["nodeid"].split("::")[1]] = []
        elif record["type"] == "race":
            report = record["report"]
            operators = (report["current"]["operator"].split("(")[0], report["previous"]["operator"].split("(")[0])
            races[record["nodeid"].split("::")[1]].append((report["kind"], *operators))
    assert races == {
        "test_a_write_after_a_racing_write_races_the_earlier_read": [
            ("write-after-read", "aten::mul_.Tensor", "aten::sum"),
            ("write-after-read", "aten::add_.Tensor", "aten::sum"),
        ],
        "test_column_blocks_blended_on_two_streams": [],
        "test_even_and_odd_elements_on_two_streams": [],
        "test_a_column_block_read_while_a_side_stream_writes_another_block_overlapping_it": [
            ("read-after-write", "aten::sum", "aten::mul_.Tensor")
        ],
        "test_a_side_stream_that_waited_before_the_allocation_fills_the_tensor": [],
        "test_a_side_stream_that_never_waited_fills_a_reused_block": [
            ("write-after-write", "aten::fill_.Scalar", "allocation")
        ],
    }
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["*the hazard is the block's reuse*"])
