"""Feedback → recalibration (issue 45): refit a bundle's calibrators (and, if asked, τ and the router) on labelled
feedback, compare the new decision with the bundle's own on a held-out part of it, and write it as a new bundle version
with its archive and a monitoring reference of the feedback (``workbench recalibrate``; docs/monitoring.md)."""
