import torch


def step(buf, s):
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = buf * 2
    torch.cuda.current_stream().wait_stream(s)
    buf.zero_()  # overwritten while `s` may still read it
    torch.cuda.current_stream().wait_stream(s)
    return out


def refill(x, s):
    y = torch.relu(x)
    s.wait_stream(torch.cuda.current_stream())
    z = y + 1
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y.copy_(x)
    torch.cuda.current_stream().wait_stream(s)
    return z, y
