"""fixture_project/, unflagged_project/, failing_project/ and facts_project/ are separate projects
that the --confirm tests run; never collect them here."""

from __future__ import annotations

collect_ignore = ["fixture_project", "unflagged_project", "failing_project", "facts_project"]
