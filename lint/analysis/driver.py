"""The analysis driver: every fact the rules read about one module, computed once, whichever
rules run (`ModuleFlow`, lint/facts.py). The rules only select, word and fix these facts.

Each analysis stays callable on its own (`csan-lint reveal` probes the stream and the host
interpreters one at a time); this is where a lint run puts their results together.
"""

from __future__ import annotations

import libcst as cst

from csan_lint.lint.analysis.assumptions import DEFAULT_ASSUMPTIONS, STALE_STREAM_CAPTURE, Assumptions
from csan_lint.lint.deferred import stale_captures
from csan_lint.lint.facts import ModuleFlow
from csan_lint.lint.hostflow import host_hazards
from csan_lint.lint.model import NO_SPELLINGS, Spellings
from csan_lint.lint.run_facts import NO_MODULE_FACTS, ModuleFacts
from csan_lint.lint.streamflow import analyse
from csan_lint.lint.summaries import PackageIndex


def module_facts(
    module: cst.Module,
    path: str,
    *,
    package: PackageIndex | None = None,
    spellings: Spellings = NO_SPELLINGS,
    assumptions: Assumptions = DEFAULT_ASSUMPTIONS,
    observed: ModuleFacts = NO_MODULE_FACTS,
) -> ModuleFlow:
    """The stream flow (lint/streamflow.py: stream hazards), then the
    host hazards (lint/hostflow.py) and the stale stream captures (lint/deferred.py) on it.
    `observed`: what test runs saw of the module's functions, which settles assumptions."""
    flow = analyse(module, path, package=package, spellings=spellings, assumptions=assumptions, observed=observed)
    flow.host_hazards = host_hazards(flow)
    if assumptions.holds(STALE_STREAM_CAPTURE):
        flow.stale_captures = stale_captures(flow.uses, flow.imports, flow.functions)
    return flow
