"""A side stream consumes what the current stream produced."""

import torch


def forward(x, s):
    y = x * 2  # produced on the current stream

    # the side stream's kernel may run before `y` is written
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        z = y + 1   # odd spacing and comments are kept
    torch.cuda.current_stream().wait_stream(s)
    return z


def loop(batches, s):
    h = torch.zeros(4, device="cuda")
    for b in batches:
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out = h * 2
        torch.cuda.current_stream().wait_stream(s)
        h = torch.relu(b) + out
        out.record_stream(torch.cuda.current_stream())
