"""List the bundles under a directory (``workbench bundles``): name, version, methods and key held-out figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.bundle.integrity import read_manifest, verify_bundle_dir
from workbench.bundle.schema import bundle_versions
from workbench.core.errors import DataError


@dataclass
class BundleEntry:
    """One bundle version found on disk; ``status`` is ``ok``, ``verified`` or the reason it cannot be loaded."""

    name: str
    version: str
    path: Path
    created: str
    methods: list[str]
    metrics: dict[str, Any]
    status: str


def _key_metrics(manifest: dict[str, Any]) -> dict[str, Any]:
    """τ and the chosen router's routed quality; the metrics block is free-form provenance, so read defensively."""
    out: dict[str, Any] = {}
    decision = manifest.get("decision") or {}
    if decision:
        out["tau"] = decision.get("tau")
    routing = (manifest.get("metrics") or {}).get("routing")
    rows = routing.get("rows") if isinstance(routing, dict) else None
    if isinstance(rows, list):
        row = next((r for r in rows if isinstance(r, dict) and r.get("router") == routing.get("chosen")), None)
        if row:
            out["routed_contains"] = row.get("contains")
            out["retrieval_rate"] = row.get("retrieval_rate")
    return out


def list_bundles(root: str | Path, *, verify: bool = False) -> list[BundleEntry]:
    """Every ``<root>/<name>/<X.Y.Z>/`` bundle, sorted by name then version; ``verify`` also checks every file's
    sha256 (otherwise only the manifest is read)."""
    root = Path(root)
    entries: list[BundleEntry] = []
    if not root.is_dir():
        return entries
    for name_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for _, path in bundle_versions(name_dir):
            try:
                manifest = verify_bundle_dir(path) if verify else read_manifest(path)
                status = "verified" if verify else "ok"
            except DataError as exc:
                entries.append(BundleEntry(name_dir.name, path.name, path, "", [], {}, f"refused: {exc.what}"))
                continue
            entries.append(
                BundleEntry(
                    name=str(manifest.get("name", name_dir.name)),
                    version=str(manifest.get("version", path.name)),
                    path=path,
                    created=str(manifest.get("created", "")),
                    methods=list(manifest.get("methods", {})),
                    metrics=_key_metrics(manifest),
                    status=status,
                )
            )
    return entries
