"""Device tensors of the emulated device, exercised the way GPU test code uses them."""

from __future__ import annotations

import gc
import pickle

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("device")

CUDA0 = torch.device("cuda", 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(3, device="cuda"),
        lambda: torch.ones(3, device="cuda:0"),
        lambda: torch.randn(3, device=torch.device("cuda")),
        lambda: torch.arange(3, device="cuda"),
        lambda: torch.full((3,), 2.0, device="cuda"),
        lambda: torch.tensor([1.0, 2.0, 3.0], device="cuda"),
        lambda: torch.as_tensor([1.0, 2.0, 3.0], device="cuda"),
        lambda: torch.ones(3).cuda(),
        lambda: torch.ones(3).to("cuda"),
        lambda: torch.ones(3).to(device="cuda", dtype=torch.float64),
    ],
)
def test_factories_and_moves_make_device_tensors(make):
    x = make()
    assert x.device == CUDA0
    assert x.is_cuda and not x.is_cpu
    assert x.get_device() == 0
    assert "device='cuda:0'" in repr(x)


def test_results_views_and_likes_stay_on_the_device():
    x = torch.ones(4, device="cuda")
    assert (x + 1).device == CUDA0
    assert x[1:].device == CUDA0
    assert x.view(2, 2).t().device == CUDA0
    assert torch.zeros_like(x).device == CUDA0
    assert x.new_zeros(2).device == CUDA0
    assert torch.zeros(3, device=x.device).device == CUDA0
    assert x.double().device == CUDA0
    assert torch.stack([x, x]).device == CUDA0
    assert x.max(dim=0).values.device == CUDA0


def test_host_tensors_stay_on_the_host():
    x = torch.ones(3)
    assert x.device == torch.device("cpu")
    assert not x.is_cuda and x.is_cpu
    assert x.get_device() == -1
    assert (x * 2).device == torch.device("cpu")


def test_cpu_copies_back_and_item_reads_the_value():
    x = torch.arange(4.0, device="cuda")
    host = x.cpu()
    assert host.device == torch.device("cpu")
    assert host.data_ptr() != x.data_ptr()
    host[0] = 100.0
    assert x[0].item() == 0.0
    assert x.to("cpu").device == torch.device("cpu")
    assert x.sum().item() == 6.0
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert x.cuda() is x
    assert x.to("cuda") is x


def test_to_other_tensor_follows_its_device_and_dtype():
    on_device = torch.ones(2, device="cuda", dtype=torch.float64)
    assert torch.ones(2).to(on_device).device == CUDA0
    assert torch.ones(2).to(on_device).dtype == torch.float64
    assert on_device.to(torch.ones(1)).device == torch.device("cpu")


def test_pinned_memory_and_non_blocking_copies():
    pageable = torch.arange(4.0)
    pinned = pageable.pin_memory()
    assert pinned.is_pinned() and not pageable.is_pinned()
    assert pinned.device == torch.device("cpu")
    assert pinned.pin_memory() is pinned
    assert torch.empty(3, pin_memory=True).is_pinned()
    x = pinned.to("cuda", non_blocking=True)
    assert x.device == CUDA0 and x.tolist() == [0.0, 1.0, 2.0, 3.0]
    back = x.to("cpu", non_blocking=True)
    # CUDA's non-blocking device-to-host copy lands in pinned memory.
    assert back.is_pinned() and back.device == torch.device("cpu")
    assert not x.cpu().is_pinned()


def test_module_cuda_forward_and_backward_keep_params_and_grads_on_the_device():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2)).cuda()
    inputs = torch.randn(5, 4, device="cuda")
    loss = F.cross_entropy(model(inputs), torch.tensor([0, 1, 0, 1, 1], device="cuda"))
    loss.backward()
    for parameter in model.parameters():
        assert parameter.device == CUDA0
        assert parameter.grad is not None and parameter.grad.device == CUDA0
    assert loss.device == CUDA0
    moved = torch.nn.Linear(2, 2).to("cuda")
    assert moved.weight.device == CUDA0


def test_backward_through_dtype_casts_and_indexing_gives_device_grads():
    x = torch.randn(4, 5, device="cuda", requires_grad=True)
    (x.half().float()[torch.tensor([0, 2], device="cuda")].sum() + x[1].sum()).backward()
    assert x.grad.device == CUDA0


def test_optimizer_step_on_device_params():
    model = torch.nn.Linear(3, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(1, 3, device="cuda")).sum().backward()
    optimizer.step()
    assert model.weight.device == CUDA0
    assert optimizer.state[model.weight]["exp_avg"].device == CUDA0


def test_mixing_device_and_host_tensors_raises_like_cuda():
    x = torch.ones(3, device="cuda")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(3)
    # A 0-dim host tensor is a scalar CUDA accepts.
    assert (x * torch.tensor(2.0)).device == CUDA0


def test_invalid_device_ordinal_raises():
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.zeros(1, device="cuda:1")
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.ones(1).cuda(1)


def test_numpy_of_a_device_tensor_raises_like_cuda():
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        torch.ones(1, device="cuda").numpy()


def test_cuda_manual_seed_reproduces_device_randomness_without_touching_the_host_stream():
    torch.manual_seed(1)
    host_expected = torch.rand(3)
    torch.manual_seed(1)
    torch.cuda.manual_seed(7)
    first = torch.randn(4, device="cuda")
    host_actual = torch.rand(3)
    torch.cuda.manual_seed(7)
    second = torch.randn(4, device="cuda")
    assert torch.equal(first.cpu(), second.cpu())
    assert torch.equal(host_expected, host_actual)
    state = torch.cuda.get_rng_state()
    third = torch.rand(2, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(third.cpu(), torch.rand(2, device="cuda").cpu())


def test_memory_allocated_counts_live_device_bytes():
    gc.collect()
    before = torch.cuda.memory_allocated()
    x = torch.empty(256, device="cuda", dtype=torch.float32)
    assert torch.cuda.memory_allocated() == before + 1024
    assert torch.cuda.max_memory_allocated() >= before + 1024
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == before + 1024
    assert torch.cuda.memory.memory_allocated() == before + 1024
    assert str(before + 1024) in torch.cuda.memory_summary()
    del x
    assert torch.cuda.memory_allocated() == before
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == before
    torch.cuda.empty_cache()


def test_device_module_functions():
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == 1
    assert torch.cuda.current_device() == 0
    torch.cuda.set_device(0)
    assert isinstance(torch.cuda.get_device_name(), str)
    assert torch.cuda.get_device_capability() >= (7, 0)
    with torch.cuda.device(0):
        assert torch.zeros(1, device="cuda").device == CUDA0
    torch.cuda.ipc_collect()
    torch.cuda.set_sync_debug_mode(0)
    assert torch.cuda.get_sync_debug_mode() == 0
    states = torch.cuda.get_rng_state_all()
    first = torch.rand(2, device="cuda")
    torch.cuda.set_rng_state_all(states)
    assert torch.equal(first.cpu(), torch.rand(2, device="cuda").cpu())


def test_to_with_copy_and_memory_format():
    x = torch.ones(2, 3, device="cuda")
    copied = x.to("cuda", copy=True)
    assert copied.device == CUDA0 and copied.data_ptr() != x.data_ptr()
    assert x.to(torch.float64, copy=True).device == CUDA0
    assert x.to("cuda", torch.float32, False, True).data_ptr() != x.data_ptr()
    assert x.to(torch.float32, False, True).data_ptr() != x.data_ptr()
    assert (
        torch.ones(1, 2, 2, 2)
        .to("cuda", memory_format=torch.channels_last)
        .is_contiguous(memory_format=torch.channels_last)
    )


def test_tensor_type_names_and_moves():
    x = torch.ones(2, device="cuda")
    assert x.type() == "torch.cuda.FloatTensor"
    assert torch.ones(2).type() == "torch.FloatTensor"
    assert x.type("torch.cuda.DoubleTensor").device == CUDA0
    assert x.type("torch.DoubleTensor").device == torch.device("cpu")
    assert torch.ones(2).type("torch.cuda.LongTensor").type() == "torch.cuda.LongTensor"


def test_device_generator_reproduces_and_is_a_generator():
    generator = torch.Generator(device="cuda")
    assert generator.device == CUDA0
    assert isinstance(generator, torch.Generator)
    assert isinstance(torch.default_generator, torch.Generator)
    assert torch.Generator().device == torch.device("cpu")
    generator.manual_seed(3)
    first = torch.randn(4, device="cuda", generator=generator)
    generator.manual_seed(3)
    assert torch.equal(first.cpu(), torch.randn(4, device="cuda", generator=generator).cpu())


def test_cuda_autocast_casts_and_grad_scaler_steps():
    model = torch.nn.Linear(4, 4).cuda()
    x = torch.randn(2, 4, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        y = model(x)
    assert y.dtype == torch.float16 and y.device == CUDA0
    assert model(x).dtype == torch.float32
    scaler = torch.amp.GradScaler("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(before.cpu(), model.weight.detach().cpu())


def test_profiler_annotations_and_capability_queries_work():
    with torch.cuda.nvtx.range("step"):
        torch.cuda.nvtx.range_push("inner")
        torch.cuda.nvtx.mark("here")
        torch.cuda.nvtx.range_pop()
    assert torch.cuda.is_bf16_supported()
    free, total = torch.cuda.mem_get_info()
    x = torch.empty(1024, device="cuda")
    # The caching allocator takes a 2 MiB segment for a small request: free memory is what no
    # segment holds.
    assert torch.cuda.mem_get_info() == (free - 2**21, total)
    del x


def test_save_and_load_keep_device_tensors_on_the_device():
    import io

    model = torch.nn.Linear(2, 2).cuda()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    assert {v.device for v in torch.load(buffer).values()} == {CUDA0}
    buffer.seek(0)
    assert {v.device for v in torch.load(buffer, map_location="cpu").values()} == {torch.device("cpu")}
    host = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).state_dict(), host)
    host.seek(0)
    loaded = torch.load(host, map_location="cuda")
    assert {v.device for v in loaded.values()} == {CUDA0}
    assert model.weight.untyped_storage().is_cuda and not torch.ones(1).untyped_storage().is_cuda


def test_new_tensor_follows_the_source_device_and_dtype():
    x = torch.ones(2, device="cuda", dtype=torch.float64)
    made = x.new_tensor([1, 2])
    assert made.device == CUDA0 and made.dtype == torch.float64
    assert torch.ones(2).new_tensor([1.0]).device == torch.device("cpu")
    assert torch.ones(2).new_tensor([1.0], device="cuda").device == CUDA0
    assert x.new_tensor([1.0], device="cpu").device == torch.device("cpu")


def test_likes_and_news_go_where_the_user_names():
    x = torch.ones(2, 2, device="cuda")
    host_made = (
        torch.zeros_like(x, device="cpu"),
        torch.empty_like(x, device="cpu"),
        x.new_zeros(3, device="cpu"),
        x.new_full((2,), 1.0, device="cpu"),
    )
    for made in host_made:
        assert made.device == torch.device("cpu")
    for made in (
        torch.zeros_like(x),
        torch.randn_like(x),
        x.new_ones(3),
        torch.ones_like(torch.ones(2), device="cuda"),
    ):
        assert made.device == CUDA0
    staging = torch.empty_like(x, device="cpu", pin_memory=True)
    assert staging.is_pinned() and staging.device == torch.device("cpu")


def test_deepcopy_and_pickle_keep_device_tensors_on_the_device():
    import copy
    import pickle

    x = torch.arange(3.0, device="cuda")
    duplicates = (copy.deepcopy(x), pickle.loads(pickle.dumps(x)), copy.deepcopy(torch.nn.Linear(2, 2).cuda()).weight)
    for duplicate in duplicates:
        assert duplicate.device == CUDA0
    assert copy.deepcopy(x).data_ptr() != x.data_ptr()
    assert copy.deepcopy(x).tolist() == [0.0, 1.0, 2.0]
    assert copy.deepcopy(torch.ones(1)).device == torch.device("cpu")


def test_a_bare_device_index_names_the_emulated_device():
    assert torch.device(0) == torch.device("cuda", 0) == torch.device(type="cuda", index=0)
    assert isinstance(torch.device(0), torch.device) and type(torch.device(0)) is type(torch.device("cpu"))
    assert pickle.loads(pickle.dumps(torch.device(0))) == torch.device("cuda:0")
    for moved in (torch.ones(2).to(0), torch.ones(2).to(device=0), torch.ones(2).to(0, torch.float64)):
        assert moved.is_cuda and moved.tolist() == [1.0, 1.0]
    assert torch.ones(2).to(0, torch.float64).dtype == torch.float64


def test_factories_take_a_bare_device_index_as_the_emulated_device():
    host = torch.ones(2)
    made = (
        torch.zeros(2, device=0),
        torch.rand(3, device=0),
        torch.arange(4, device=0),
        torch.full((2,), 7.0, device=0),
        torch.zeros_like(host, device=0),
        host.new_ones(2, device=0),
    )
    for tensor in made:
        assert tensor.is_cuda and tensor.device == torch.device("cuda", 0)
    assert torch.arange(4, device=0).tolist() == [0, 1, 2, 3]
    assert torch.zeros(2, device=0, dtype=torch.float64).dtype == torch.float64


def test_a_device_context_still_fills_in_the_device_of_wrapped_factories():
    with torch.device("cuda"):
        made = (torch.empty(2), torch.ones(2), torch.nn.Linear(2, 2).weight)
    assert all(tensor.is_cuda for tensor in made)
    with torch.device("meta"):
        assert torch.zeros(2).is_meta and torch.nn.Linear(2, 2).weight.is_meta
    assert not torch.empty(1).is_cuda and not torch.empty(1).is_meta
