"""The distribution ships every package of the source tree under `csan_lint`, and nothing bare."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed_and_mapped() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    source_packages = {
        "csan_lint." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("lint", "rules", "runtime")
        for init in (ROOT / top).rglob("__init__.py")
    } | {"csan_lint"}

    assert set(setuptools["packages"]) == source_packages
    for package in source_packages - {"csan_lint"}:
        relative = package.removeprefix("csan_lint.").replace(".", "/")
        assert package_dir[package] == relative
    assert not {"lint", "rules", "runtime"} & set(package_dir), "no bare top-level packages"
