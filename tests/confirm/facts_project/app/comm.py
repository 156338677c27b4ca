import torch


class Comm:
    def __init__(self):
        self.side = torch.cuda.Stream()

    def send(self, x):
        with torch.cuda.stream(self.side):
            y = x * 2
        torch.cuda.current_stream().wait_stream(self.side)
        return y

    def upload(self, host):
        return host.to("cuda", non_blocking=True)

    def snapshot_grad(self, p):
        with torch.cuda.stream(self.side):
            kept = p.grad * 1
        torch.cuda.current_stream().wait_stream(self.side)
        return kept

    def gather(self, x):
        self.side.wait_stream(torch.cuda.current_stream())
        with self.side:
            y = x + 1
        torch.cuda.default_stream().wait_stream(self.side)
        return y

    def fetch(self, x, non_blocking):
        host = x.to("cpu", non_blocking=non_blocking)
        return host.tolist()

    def drain(self, x, out):
        out.copy_(x, non_blocking=True)
        return out.tolist()


def double(x):
    return x * 2
