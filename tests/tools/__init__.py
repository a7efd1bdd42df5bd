"""Developer tools run from the repository root (``python -m tests.tools.<name>``)."""
