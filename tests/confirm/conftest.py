"""fixture_project/ is a separate project that the --confirm tests run; never collect it here."""

collect_ignore = ["fixture_project"]
