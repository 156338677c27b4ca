"""The static analysis' semantic model, apart from the shell around it (discovery, cache,
outputs, CLI). So far: the table of the stream API (api.py); docs/architecture.md says what
is still to move here."""
