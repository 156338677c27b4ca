"""Driver tests for transformers' offloaded KV caches: greedy `generate()` on a tiny randomly
initialised Llama (no hub download, no tokenizer), offloaded cache against the plain one.

Copied by benchmarks/realsuite/run.py into a scratch folder and run there on the emulated
device (or a GPU); the offloaded caches' stream code (a prefetch stream, non-blocking copies to
and from the host) is what the sanitizer watches.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import DynamicCache, StaticCache
from transformers.generation.configuration_utils import STATIC_CACHE_IMPLEMENTATIONS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (or --csan-emulate)")

NEW_TOKENS = 6


def tiny_llama(layers: int = 2) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("cuda").eval()


def greedy(model: LlamaForCausalLM, prompt: torch.Tensor, **kwargs) -> torch.Tensor:
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=0,
        **kwargs,
    )


def prompt(batch: int = 2, length: int = 5) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(1, 96, (batch, length), generator=generator).to("cuda")


@pytest.mark.parametrize("layers", [2, 3])
def test_offloaded_cache_generates_the_plain_caches_tokens(layers):
    model = tiny_llama(layers)
    tokens = prompt()
    expected = greedy(model, tokens)
    got = greedy(model, tokens, cache_implementation="offloaded")
    assert got.shape == (2, 5 + NEW_TOKENS)
    assert torch.equal(got.cpu(), expected.cpu())


@pytest.mark.skipif("offloaded_static" not in STATIC_CACHE_IMPLEMENTATIONS, reason="no offloaded static cache")
def test_offloaded_static_cache_generates_the_plain_caches_tokens():
    model = tiny_llama()
    tokens = prompt()
    expected = greedy(model, tokens)
    got = greedy(model, tokens, cache_implementation="offloaded_static")
    assert torch.equal(got.cpu(), expected.cpu())


def test_explicit_offloaded_dynamic_cache_keeps_layers_on_the_host():
    model = tiny_llama()
    cache = DynamicCache(config=model.config, offloading=True)
    got = greedy(model, prompt(batch=1), cache=cache)
    torch.cuda.synchronize()
    assert got.shape == (1, 5 + NEW_TOKENS)
    # every layer but the one prefetched for the next step lives on the host
    devices = [layer.keys.device.type for layer in cache.layers]
    assert devices.count("cpu") >= len(devices) - 1


def test_explicit_offloaded_static_cache_matches_the_plain_static_cache():
    model = tiny_llama()
    tokens = prompt(batch=1)
    # eager: generate() compiles the forward of a static cache by default (the test above)
    plain = greedy(model, tokens, cache=StaticCache(config=model.config, max_cache_len=32), disable_compile=True)
    offloaded_cache = StaticCache(config=model.config, max_cache_len=32, offloading=True)
    got = greedy(model, tokens, cache=offloaded_cache, disable_compile=True)
    assert torch.equal(got.cpu(), plain.cpu())
