import torch


class Prefetcher:
    def load(self, batch):
        with torch.cuda.stream(self.copy_stream):
            self.buf = batch.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(self.copy_stream)
        return self.buf.float()  # read on the current stream


def accumulate(xs, s):
    out = torch.zeros(4, device="cuda")
    for x in xs:
        torch.cuda.current_stream().wait_stream(s)
        total = out + x
        with torch.cuda.stream(s):
            out = torch.relu(x)
    torch.cuda.current_stream().wait_stream(s)
    out.record_stream(torch.cuda.current_stream())
    return out


def two_side_streams(a, b):
    with torch.cuda.stream(a):
        y = torch.ones(4, device="cuda")
    with torch.cuda.stream(b):
        b.wait_stream(a)
        z = y * 2
    torch.cuda.synchronize()
    z.record_stream(torch.cuda.current_stream())
    return z
