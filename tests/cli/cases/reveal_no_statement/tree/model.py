import torch


def prefetch(x, side):
    y = x * 2
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        host = torch.empty(4, pin_memory=True)
        host.copy_(y, non_blocking=True)
        done = torch.cuda.Event()
        done.record()

    return host, done
