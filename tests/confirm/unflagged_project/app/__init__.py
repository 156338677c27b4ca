"""Stream code the linter passes: what --confirm must still run and check."""
