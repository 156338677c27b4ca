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
