"""Unit tests of the backends (tiny random models)."""
