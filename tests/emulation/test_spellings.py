"""Every spelling of the device and of pinned memory that library code uses runs on the emulated
device as on a CUDA build; what is not emulated raises `EmulationGap` naming it."""

from __future__ import annotations

import pytest
import torch

from csan_lint.runtime.emulation.gaps import EmulationGap

pytestmark = pytest.mark.usefixtures("device")
CUDA0 = torch.device("cuda", 0)

SHAPED_FACTORIES = {
    "empty": lambda **kw: torch.empty(3, **kw),
    "zeros": lambda **kw: torch.zeros(3, **kw),
    "ones": lambda **kw: torch.ones(3, **kw),
    "full": lambda **kw: torch.full((3,), 2.0, **kw),
    "rand": lambda **kw: torch.rand(3, **kw),
    "randn": lambda **kw: torch.randn(3, **kw),
    "randint": lambda **kw: torch.randint(5, (3,), **kw),
    "arange": lambda **kw: torch.arange(3, **kw),
    "linspace": lambda **kw: torch.linspace(0, 1, 3, **kw),
    "eye": lambda **kw: torch.eye(3, **kw),
    "empty_strided": lambda **kw: torch.empty_strided((3,), (1,), **kw),
    "tensor": lambda **kw: torch.tensor([1.0, 2.0, 3.0], **kw),
    "empty_like": lambda **kw: torch.empty_like(torch.ones(3), **kw),
    "zeros_like": lambda **kw: torch.zeros_like(torch.ones(3), **kw),
    "ones_like": lambda **kw: torch.ones_like(torch.ones(3), **kw),
    "full_like": lambda **kw: torch.full_like(torch.ones(3), 2.0, **kw),
    "rand_like": lambda **kw: torch.rand_like(torch.ones(3), **kw),
    "randn_like": lambda **kw: torch.randn_like(torch.ones(3), **kw),
}


@pytest.mark.parametrize("factory", list(SHAPED_FACTORIES))
def test_pin_memory_of_every_factory_makes_pinned_host_memory(factory):
    made = SHAPED_FACTORIES[factory](pin_memory=True)
    assert made.device == torch.device("cpu") and made.is_pinned()
    assert made.shape == (3,) or made.shape == (3, 3)


def test_a_like_of_a_pinned_tensor_with_pin_memory_and_no_device_is_pinned():
    staging = torch.ones(4).pin_memory()
    copy = torch.empty_like(staging, pin_memory=True)
    assert copy.is_pinned() and copy.device == torch.device("cpu")
    assert copy.data_ptr() != staging.data_ptr()


@pytest.mark.parametrize("spelling", [0, "cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)], ids=repr)
@pytest.mark.parametrize("factory", list(SHAPED_FACTORIES))
def test_every_factory_takes_every_spelling_of_the_device(factory, spelling):
    made = SHAPED_FACTORIES[factory](device=spelling)
    assert made.device == CUDA0 and made.is_cuda


TO_SIGNATURES = {
    "device": lambda x, other: x.to("cuda"),
    "index": lambda x, other: x.to(0),
    "index keyword": lambda x, other: x.to(device=0),
    "torch.device": lambda x, other: x.to(torch.device("cuda", 0)),
    "device and dtype": lambda x, other: x.to("cuda", torch.float16),
    "index and dtype": lambda x, other: x.to(0, torch.float16),
    "keywords": lambda x, other: x.to(dtype=torch.float16, device=0),
    "other tensor": lambda x, other: x.to(other),
    "other tensor, non_blocking, copy": lambda x, other: x.to(other, True, True),
    "non_blocking": lambda x, other: x.to("cuda", non_blocking=True),
    "copy": lambda x, other: x.to("cuda", copy=True),
    "positional non_blocking and copy": lambda x, other: x.to("cuda", torch.float16, True, True),
    "memory_format": lambda x, other: x.to("cuda", memory_format=torch.channels_last),
    "cuda()": lambda x, other: x.cuda(),
    "cuda(index)": lambda x, other: x.cuda(0),
    "cuda(name)": lambda x, other: x.cuda("cuda:0"),
}


@pytest.mark.parametrize("signature", list(TO_SIGNATURES))
def test_every_signature_of_to_moves_to_the_device(signature):
    host = torch.arange(24.0).reshape(1, 2, 3, 4)
    other = torch.ones(1, device="cuda", dtype=torch.float16)
    moved = TO_SIGNATURES[signature](host, other)
    assert moved.device == CUDA0
    assert torch.equal(moved.cpu().float(), host)


def test_parse_to_takes_an_index_as_the_accelerator():
    # tensordict parses `.to()` arguments with it
    device, dtype, non_blocking, _ = torch._C._nn._parse_to(0, torch.float16, non_blocking=True)
    assert (device, dtype, non_blocking) == (CUDA0, torch.float16, True)
    assert torch._C._nn._parse_to(device=0)[0] == CUDA0


def test_pin_memory_of_views_and_storages():
    base = torch.arange(16.0).reshape(4, 4)
    for view in (base[1:3], base.t(), base[:, 1]):
        pinned = view.pin_memory()
        assert pinned.is_pinned() and torch.equal(pinned, view)
    storage = torch.UntypedStorage(16)
    assert storage.pin_memory().is_pinned()


def test_a_memory_mapped_tensor_moves_to_the_device(tmp_path):
    path = tmp_path / "mapped.bin"
    path.write_bytes(b"\0" * 32)
    mapped = torch.from_file(str(path), shared=True, size=8, dtype=torch.float32)
    mapped.copy_(torch.arange(8.0))
    for moved in (mapped.cuda(), mapped.to("cuda"), mapped.to(0, non_blocking=True)):
        assert moved.device == CUDA0 and torch.equal(moved.cpu(), torch.arange(8.0))
    storage = torch.UntypedStorage.from_file(str(path), True, 32)
    assert torch.empty(0).set_(storage).cuda().device == CUDA0


@pytest.mark.parametrize("move", ["cuda", "to", "index"])
def test_a_nested_jagged_tensor_moves_to_the_device_and_back(move):
    nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged)
    moved = {"cuda": nested.cuda, "to": lambda: nested.to("cuda"), "index": lambda: nested.to(0)}[move]()
    assert moved.is_cuda and moved.device == CUDA0
    assert moved.values().device == CUDA0 and moved.offsets().device == CUDA0
    back = (moved * 2).cpu()
    assert back.device == torch.device("cpu") and back.values().device == torch.device("cpu")
    assert back.values().sum().item() == 36.0


def test_out_of_memory_is_cudas_error():
    with pytest.raises(torch.OutOfMemoryError, match=r"^CUDA out of memory\. Tried to allocate .* GiB\. GPU 0"):
        torch.empty(2**45, dtype=torch.int8, device="cuda")
    with pytest.raises(torch.OutOfMemoryError, match=r"^CUDA out of memory\. Tried to allocate 96\.00 GiB"):
        torch.empty(96 * 2**30, dtype=torch.int8, device="cuda")  # past the 80 GiB device
    assert torch.cuda.memory_stats()["num_ooms"] == 2
    kept = torch.ones(4, device="cuda")
    assert kept.sum().item() == 4.0  # the device works on


@pytest.mark.parametrize(
    ("make", "op"),
    [
        (lambda: torch.eye(2).to_sparse().cuda(), "sparse_coo tensors"),
        (lambda: torch.sparse_coo_tensor([[0]], [1.0], (1,), device="cuda"), "sparse tensors"),
        (lambda: torch.ones(4, device="cuda").untyped_storage().resize_(0), "resizing a device storage"),
    ],
)
def test_what_is_not_emulated_is_a_named_gap(make, op):
    with pytest.raises(EmulationGap, match=f"the emulated device does not support .*{op}.*: please report it"):
        make()


class _Mapped(torch.Tensor):
    """As tensordict's MemoryMappedTensor: a subclass made from a tensor with `__new__`."""

    def __new__(cls, source):
        return super().__new__(cls, source)


def test_a_subclass_made_from_a_tensor_works_and_moves_to_the_device():
    mapped = _Mapped(torch.frombuffer(bytearray(24), dtype=torch.float32).view(6))
    assert type(mapped) is _Mapped and mapped.device == torch.device("cpu")
    moved = mapped.to(0)
    assert moved.device == CUDA0 and moved.sum().item() == 0.0
