"""Backward ops run on the stream their forward op ran on, with autograd's syncs (on CUDA;
emulated by runtime/emulation/autograd_streams.py), so side-stream training code gets the
verdicts it gets on a GPU."""

from __future__ import annotations

import torch

from csan_lint.runtime import kinds, sanitize


def _forward_on_side_stream():
    x = torch.ones(8, device="cuda")
    w = torch.ones(8, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        hidden = torch.relu(w * x)  # saved for backward, written on `side`
        loss = hidden.sum()
    return x, w, hidden, loss, side


def test_backward_of_side_stream_work_runs_there_and_joins_the_caller():
    with sanitize(device="emulated") as sanitizer:
        x, w, hidden, loss, side = _forward_on_side_stream()
        loss.backward()  # on the default stream
        w.grad.sum()  # ordered: backward() joined the side stream into the caller's
        hidden.add_(1)
    assert [e.kind for e in sanitizer.errors] == []


def test_a_gradient_hook_syncing_with_the_wrong_stream_races():
    # The class of DeepSpeed ZeRO-3's "wrong stream" bug: a hook hands the gradient to another
    # stream after waiting on the default stream, but backward produced it on the side stream.
    with sanitize(device="emulated") as sanitizer:
        x, w, hidden, loss, side = _forward_on_side_stream()
        reduce_stream = torch.cuda.Stream()
        bucket = torch.zeros(8, device="cuda")

        def hook(grad: torch.Tensor) -> None:
            reduce_stream.wait_stream(torch.cuda.default_stream())
            with torch.cuda.stream(reduce_stream):
                bucket.copy_(grad)

        w.register_hook(hook)
        loss.backward()
    [report] = sanitizer.errors
    assert report.kind == kinds.READ_AFTER_WRITE and "copy_" in report.current.operator
    # the gradient was written on the forward's stream, which the hook never waited for
    assert report.previous.stream == side.cuda_stream != 0
