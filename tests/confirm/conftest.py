"""fixture_project/ is a separate project that the --confirm tests run; never collect it here."""

from __future__ import annotations

collect_ignore = ["fixture_project"]
