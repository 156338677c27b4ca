"""Child processes of an emulated run run on the emulated device too: a `python` child started
by `subprocess` (`python -c ...`), `multiprocessing` spawn / forkserver workers,
`torch.multiprocessing.spawn`. A forked child inherits the device with the rest of the process.

The way coverage.py reaches subprocesses: while the emulation is on, the environment names it
(`CSAN_LINT_EMULATED_CHILDREN=1`) and puts this package's `startup/` directory first on
`PYTHONPATH`, whose `sitecustomize` every new interpreter imports at start-up. When the variable
is set, it installs an import hook that turns the emulated device on right after the child
imports torch (a child that never imports torch pays nothing, not even torch's import), then
hands over to the user's own `sitecustomize`, if any. When the parent runs sanitized, the child
is checked too and its races reach the parent's run (runtime/child_races.py). The parent's
device memory size (`CSAN_LINT_DEVICE_MEMORY`) reaches the child through the same environment.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ENVIRONMENT = "CSAN_LINT_EMULATED_CHILDREN"
STARTUP_DIRECTORY = str(Path(__file__).resolve().with_name("startup"))


class _Environment:
    """What `export` changed in `os.environ`, to give it back."""

    def __init__(self) -> None:
        self.saved: dict[str, str | None] | None = None


_environment = _Environment()


def export() -> None:
    """From now on, child processes start on the emulated device."""
    if _environment.saved is not None:
        return
    _environment.saved = {name: os.environ.get(name) for name in (ENVIRONMENT, "PYTHONPATH")}
    os.environ[ENVIRONMENT] = "1"
    path = os.environ.get("PYTHONPATH")
    entries = [entry for entry in (path or "").split(os.pathsep) if entry and entry != STARTUP_DIRECTORY]
    os.environ["PYTHONPATH"] = os.pathsep.join([STARTUP_DIRECTORY, *entries])


def withdraw() -> None:
    """Child processes start as they would without the emulation."""
    saved, _environment.saved = _environment.saved, None
    for name, value in (saved or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class _ActivateAfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of `torch` so that the emulated device is turned on
    once torch has been imported."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ActivatingLoader(spec.loader)
        return spec


class _ActivatingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _turn_on()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def start_child() -> None:
    """At a child's start-up (`startup/sitecustomize.py`): the device once torch is imported."""
    if os.environ.get(ENVIRONMENT) != "1":
        return
    if "torch" in sys.modules:  # imported already (a .pth file did): at once
        _turn_on()
        return
    sys.meta_path.insert(0, _ActivateAfterTorch())


def _turn_on() -> None:
    """The emulated device, and the sanitizer when the parent runs sanitized."""
    from csan_lint.runtime import child_races, emulation

    emulation.activate()
    child_races.start_in_child()
