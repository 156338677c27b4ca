"""Backward ops run on the stream their forward op ran on, with autograd's syncs (on CUDA;
emulated by runtime/emulation/autograd_streams.py), so side-stream training code gets the
verdicts it gets on a GPU."""

from __future__ import annotations

import gc
import weakref

import pytest
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
                bucket.copy_(grad)  # csan-lint: ignore[CSL101,CSL103] (the race the test wants reported)

        w.register_hook(hook)
        loss.backward()
    [report] = sanitizer.errors
    assert report.kind == kinds.READ_AFTER_WRITE and "copy_" in report.current.operator
    # the gradient was written on the forward's stream, which the hook never waited for
    assert report.previous.stream == side.cuda_stream != 0


def _leaf_used_on_two_streams(first_on_side: bool) -> tuple[torch.Tensor, torch.Tensor, torch.cuda.Stream]:
    x = torch.ones(8, device="cuda", requires_grad=True)
    ambient, side = torch.cuda.current_stream(), torch.cuda.Stream()
    side.wait_stream(ambient)
    if first_on_side:
        with torch.cuda.stream(side):
            on_side = x * 2
        on_ambient = x * 3
    else:
        on_ambient = x * 3
        with torch.cuda.stream(side):
            on_side = x * 2
    ambient.wait_stream(side)
    loss = (on_side + on_ambient).sum()
    torch.cuda.synchronize()  # the forward's blocks may be freed: only backward is under test
    return x, loss, side


@pytest.mark.parametrize("first_on_side", [True, False])
def test_a_leaf_used_on_two_streams_gets_its_gradient_on_the_stream_of_its_first_use(first_on_side: bool):
    with sanitize(device="emulated") as sanitizer:
        x, loss, side = _leaf_used_on_two_streams(first_on_side)
        seen: list[int] = []
        x.register_hook(lambda grad: seen.append(torch.cuda.current_stream().cuda_stream))
        loss.backward()
        x.grad.sum()
    assert seen == [side.cuda_stream if first_on_side else 0]
    # the gradients of the two branches are accumulated with autograd's syncs and
    # record_stream (InputBuffer::add): no race, no free-in-use
    assert [e.kind for e in sanitizer.errors] == []


def test_a_graph_is_freed_when_its_last_reference_goes_not_at_the_next_collection():
    # The stream hooks on each node must not keep the graph (and its saved device tensors, whose
    # frees the sanitizer checks) alive in a reference cycle.
    contexts = []

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, tensor):
            return tensor

        @staticmethod
        def backward(ctx, grad):
            contexts.append(weakref.ref(ctx))
            return grad

    gc.disable()
    try:
        with sanitize(device="emulated"):
            out = Identity.apply(torch.ones(2, device="cuda", requires_grad=True) * 2)
            out.sum().backward()
            del out
            (context,) = contexts
            assert context() is None
    finally:
        gc.enable()
