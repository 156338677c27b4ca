"""The shared workloads (tests/robustness/workloads.py), loaded by path: the soak script
(benchmarks/fuzz_static.py) runs the same code at a larger size. Loaded here, at conftest
import, so that test modules can `import csan_lint_robustness_workloads` at their top (hypothesis
strategies are needed at decoration time, before any fixture)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

WORKLOADS_NAME = "csan_lint_robustness_workloads"


def load_workloads() -> ModuleType:
    if WORKLOADS_NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(WORKLOADS_NAME, Path(__file__).with_name("workloads.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[WORKLOADS_NAME] = module  # dataclasses look their module up while defining
        spec.loader.exec_module(module)
    return sys.modules[WORKLOADS_NAME]


load_workloads()
