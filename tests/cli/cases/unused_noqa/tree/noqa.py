import torch


def staged(x, side):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # csan-lint: ignore[CSL102]
        y = x * 2
    return y + 1  # noqa: CSL102
