import torch
from app.comm import Comm, double


def test_send():
    x = torch.ones(4, device="cuda") + 1
    y = Comm().send(x)
    assert y.sum().item() == 16


def test_upload():
    host = torch.ones(4).pin_memory()
    assert Comm().upload(host).sum().item() == 4


def test_snapshot_grad():
    p = torch.ones(4, device="cuda", requires_grad=True)
    (p * 3).sum().backward()
    assert Comm().snapshot_grad(p).sum().item() == 12


def test_gather():
    x = torch.ones(4, device="cuda")
    assert Comm().gather(x).sum().item() == 8


def test_fetch():
    x = torch.ones(4, device="cuda")
    assert len(Comm().fetch(x, non_blocking=True)) == 4  # what it reads may not have landed


def test_drain():
    x = torch.ones(4, device="cuda")
    out = torch.empty(4).pin_memory()
    assert len(Comm().drain(x, out)) == 4  # what it reads may not have landed


def test_double_on_a_side_stream():
    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda") + 1
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = double(x)
    torch.cuda.current_stream().wait_stream(side)
    assert y.sum().item() == 16
