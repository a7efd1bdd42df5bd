"""Feedback → recalibration (issue 45): refit a bundle's calibrators on labelled feedback, compare them with the
bundle's own on a held-out part of it, and write the refit as a new bundle version (``workbench recalibrate``;
docs/monitoring.md)."""
