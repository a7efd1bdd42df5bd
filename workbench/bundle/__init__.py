"""Versioned bundles: export a run (:mod:`~workbench.bundle.export`), check one (:mod:`~workbench.bundle.integrity`),
pack and unpack archives safely (:mod:`~workbench.bundle.archive`), list them (:mod:`~workbench.bundle.catalog`).

The format is documented in :mod:`workbench.bundle.schema` and, field by field, in docs/bundles.md.
"""
