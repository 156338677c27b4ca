import torch
import torch.cuda as tc


def fresh_stream_each_time(x):
    y = x * 2
    with torch.cuda.stream(torch.cuda.Stream()):
        z = y + 1
    torch.cuda.synchronize()
    return z


def nested(x, a, b):
    y = x * 2
    with torch.cuda.stream(a):
        with torch.cuda.stream(b):
            z = y + 1
    torch.cuda.synchronize()
    return z


def elif_test(s, flag):
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = torch.ones(4, device="cuda")
    if flag:
        pass
    elif y.sum() > 0:
        torch.cuda.synchronize()
    return y


def same_statement(x):
    return x.to("cpu", non_blocking=True).tolist()
