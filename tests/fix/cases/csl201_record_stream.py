import torch


def producer(batches, s):
    for b in batches:
        x = b.to("cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = x.sum()
    torch.cuda.current_stream().wait_stream(s)


def copy_out(s, out):
	x = torch.randn(8, device="cuda")
	s.wait_stream(torch.cuda.current_stream())
	with torch.cuda.stream(s):
		out.copy_(x)


def doubled(batch, side):
    x = batch.cuda()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)
    torch.cuda.current_stream().wait_stream(side)
    return y + 1  # `y` dies here while the current stream may still read it
