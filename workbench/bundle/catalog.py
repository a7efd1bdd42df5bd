"""List the bundles under a directory (``workbench bundles``): name, version, methods, the shipped decision's τ (who
set it) and held-out figures, and the splits its parts were fitted on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.bundle.integrity import read_manifest, verify_bundle_dir
from workbench.bundle.provenance import splits_of
from workbench.bundle.schema import bundle_versions
from workbench.bundle.shipped import measured_on, shipped_decision
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
    """The shipped decision as every reader renders it (:func:`workbench.bundle.shipped.shipped_decision`): τ, who
    set it, its held-out routed quality and retrieval rate at that τ and where they were measured (a recalibrated
    version: its routed quality and retrieval rate on the held-out feedback);
    and the splits the shipped parts were
    fitted on and the held-out figures measured on (``provenance``)."""

    out: dict[str, Any] = {}
    decision = shipped_decision(manifest, with_defaults=False)
    if decision is not None:
        out["tau"] = decision.tau.value
        out["tau_set_by"] = decision.tau.origin(quote="")
        if decision.held_out is not None:
            out["routed_contains"] = decision.held_out.contains
            out["retrieval_rate"] = decision.held_out.retrieval_rate
        recalibrated = decision.recalibrated
        if recalibrated is not None:
            out["feedback_quality"] = recalibrated.after["quality"]
            out["retrieval_rate"] = recalibrated.after["retrieval_rate"]  # the parent's row is not this decision's
            out.pop("routed_contains", None)
        out["measured_on"] = measured_on(decision)
    provenance = manifest.get("provenance")
    if isinstance(provenance, dict):
        out["fitted_on"] = ", ".join(splits_of((provenance.get("fitted") or {}).values())) or "—"
        held = [r for r in (provenance.get("held_out") or {}).values() if not (r or {}).get("out_of_fold")]
        out["held_out"] = ", ".join(splits_of(held)) or "—"
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
