from __future__ import annotations

import pytest
import torch

from app.offload import Offloader

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

offloader = Offloader()


def test_offload_reads_an_activation_made_on_the_current_stream():
    activation = torch.arange(4.0, device="cuda") * 2
    assert offloader.offload(activation).tolist() == [0.0, 2.0, 4.0, 6.0]
