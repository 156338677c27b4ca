"""The evidence entries of the table of assumptions: a shape of code taken as evidence of a
second stream the function does not show (a swap of `p.data`, a default-stream join, a
captured current stream). The producer and entry-stream entries, and
the API to ask them, are lint/analysis/assumptions.py. Pure data.
"""

from __future__ import annotations

from csan_lint.lint.analysis.assumption import Assumption

DATA_SWAP = "data-swap-release"
DEFAULT_STREAM_JOIN = "default-stream-join"
STALE_STREAM_CAPTURE = "stale-stream-capture"

EVIDENCE: tuple[Assumption, ...] = (
    Assumption(
        DATA_SWAP,
        "Weights swapped out through `.data` release memory a side stream swapped in (lint/dataswap.py).",
        "A method that rebinds `p.data` to host memory frees the device block the copy stream "
        "allocated, while the caller's kernels may still read it. On by default, measured in "
        "round 18 on the development data: off, the corpus loses the diffusers disk-offload bug "
        "it was built from, held-out set 11 loses the bug it found at first sight (diffusers' "
        "group offloading, CSL201), and the eleven repositories lose one true finding (diffusers' "
        "`_onload_from_disk`); no finding on a fixed version rests on it.",
        example="""\
import torch


class Offloader:
    def __init__(self, module):
        self.module = module
        self.stream = torch.cuda.Stream()

    def swap_in(self):
        with torch.cuda.stream(self.stream):
            for p in self.module.parameters():
                p.data = p.data.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.stream)

    def swap_out(self):
        for p in self.module.parameters():
            p.data = torch.empty_like(p.data, device="cpu")
""",
        when_on=(("CSL201", 17),),
        when_off=(),
        default=True,
        rules=("CSL201",),
        evidence=True,
    ),
    Assumption(
        DEFAULT_STREAM_JOIN,
        "A function that makes `default_stream()` wait on a side stream meant to join its "
        "caller's stream (lint/defaultjoin.py).",
        "Under a caller's side stream or a graph capture the default stream is another stream, "
        "and the join orders nothing the caller does next. On by default, measured in round 18 "
        "on the development data: off, the corpus loses a known bug (Megatron's join of several "
        "DDP instances) and two findings of other real bugs, held-out sets 1-11 lose none, and the "
        "eleven repositories lose 6 findings, 4 true (DeepSpeed ZeRO-3, trl's activation "
        "offloading) and 2 plausible (DeepSpeed's sequence parallelism); none is on a fixed version.",
        example="""\
import torch


class Reducer:
    def finish(self):
        torch.cuda.default_stream().wait_stream(self.comm)
""",
        when_on=(("CSL102", 6),),
        when_off=(),
        default=True,
        rules=("CSL102",),
        evidence=True,
    ),
    Assumption(
        STALE_STREAM_CAPTURE,
        "A callable that captures `current_stream()` when it is built runs later, on another "
        "stream (lint/deferred.py).",
        "Its kernels launch on the stream of build time while its runner orders its results "
        "after the stream current at run time. A shape found by one corpus bug: measured in "
        "round 18 on the development data, off loses that bug (TransformerEngine's delayed weight "
        "gradient, CSL104) and nothing else; on, it adds no finding to held-out sets 1-11, to their "
        "fixed versions or to the eleven repositories. On by default: it costs nothing measured.",
        example="""\
import functools
import torch


def backward(op, x, dy, out):
    gemm = functools.partial(
        wgrad_kernel,
        stream=torch.cuda.current_stream().cuda_stream,
    )
    if op.delay:
        op.store.put([x, dy, out], gemm)
    else:
        gemm(x, dy, out)
""",
        when_on=(("CSL104", 8),),
        when_off=(),
        default=True,
        rules=("CSL104",),
        evidence=True,
    ),
)
