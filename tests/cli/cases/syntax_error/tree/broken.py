import torch


def run(side):
    with torch.cuda.stream(side)
        pass
