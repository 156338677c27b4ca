import torch


def loss_value(loss):
    host = loss.to("cpu", non_blocking=True)
    return host.item()


def fetch(x, s):
    with torch.cuda.stream(s):
        host = x.to("cpu", non_blocking=True)
    s.synchronize()
    print(host)
    again = x.to("cpu", non_blocking=True)
    if again.sum() > 0:
        return again
    return host
