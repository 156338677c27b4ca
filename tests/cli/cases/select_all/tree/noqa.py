import torch


def prefetch(batch):
    side = torch.cuda.Stream()
    x = batch.cuda()
    with torch.cuda.stream(side):  # csan-lint: ignore[missing-wait-stream]
        y = x * 2
    return y + 1  # noqa: CSL102


def prefetch_all(batch):
    side = torch.cuda.Stream()
    x = batch.cuda()
    with torch.cuda.stream(side):  # noqa
        y = x * 2
    return y + 1


def prefetch_other_code(batch):
    side = torch.cuda.Stream()
    x = batch.cuda()
    with torch.cuda.stream(side):  # csan-lint: ignore[CSL201]
        y = x * 2
    return y + 1
