"""An attribute a called function binds to a new tensor (`self.scale = torch.ones(1)`) gets a
new value: no write of the old one, also when the binding is two calls deep."""

from __future__ import annotations

import textwrap

from csan_lint.lint.engine import lint_source

SOURCE = """
import torch

class Expert:
    def prefetch(self, x):
        with torch.cuda.stream(self.stream):
            self.cached = self._compute(x)

    def forward(self, x):
        return self._outer(x)

    def _outer(self, x):
        return self._compute(x)

    def _compute(self, x):
        scale = self.scale
        if scale is None:
            scale = torch.ones(1, device=x.device)
            self.scale = scale
        return x * scale
"""


def test_a_new_value_bound_two_calls_deep_is_not_an_overwrite() -> None:
    codes = {(f.code, f.line) for f in lint_source(textwrap.dedent(SOURCE), "m.py")}
    assert not any(line == 10 for _, line in codes)
