"""Every batch arrives on the device intact, in order."""

from __future__ import annotations

import pytest
import staging_buggy
import staging_fixed
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("module", [staging_buggy, staging_fixed], ids=["buggy", "fixed"])
def test_every_batch_arrives(module):
    batches = [torch.full((4, 8), float(index)) for index in range(4)]
    uploader = module.StagingUploader((4, 8))
    assert uploader.staging.is_pinned()
    on_device = uploader.upload(batches[:2]) + uploader.upload(batches[2:])  # the next call refills too
    torch.cuda.synchronize()
    assert [tensor.is_cuda for tensor in on_device] == [True] * 4
    for tensor, batch in zip(on_device, batches, strict=True):
        torch.testing.assert_close(tensor.cpu(), batch)
