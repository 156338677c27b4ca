"""The start-up hook of child processes of an emulated run (children.py): this directory goes
first on their `PYTHONPATH`, so its `sitecustomize` runs as each new interpreter starts."""
