"""The reference inside a bundle: read only through the manifest's verified files, refused when the manifest points
its ``monitoring.file`` anywhere else."""

from __future__ import annotations

import pytest

from tests.unit.monitoring.bundles import FIXTURE, bundle_with_reference
from workbench.bundle.files import BundleFiles
from workbench.bundle.integrity import verify_bundle_dir
from workbench.core.errors import DataError
from workbench.monitoring.reference import read_reference


def test_a_bundle_with_a_reference_verifies_and_reads_it(tmp_path):
    root = bundle_with_reference(tmp_path / "b", ("entropy", "length"))
    manifest = verify_bundle_dir(root)
    reference = read_reference(BundleFiles(root, manifest), manifest, str(root))
    assert reference is not None and {"feature:length", "p_correct", "retrieval", "ood"} <= set(reference.series)
    old = verify_bundle_dir(FIXTURE)  # schema 1.0: no reference, and monitoring says so
    assert read_reference(BundleFiles(FIXTURE, old), old, str(FIXTURE)) is None


@pytest.mark.parametrize("target", ["../../outside.json", "/etc/passwd", "learned/unlisted.json"])
def test_a_monitoring_file_outside_the_listed_files_is_refused_before_it_is_read(tmp_path, target):
    root = bundle_with_reference(tmp_path / "b", ("entropy", "length"), lambda m: m["monitoring"].update(file=target))
    with pytest.raises(DataError, match=r"'monitoring\.file' names"):
        verify_bundle_dir(root)


def test_monitoring_rows_are_range_checked(tmp_path):
    root = bundle_with_reference(tmp_path / "b", ("entropy", "length"), lambda m: m["monitoring"].update(rows=-1))
    with pytest.raises(DataError, match=r"'monitoring\.rows' must be >= 0"):
        verify_bundle_dir(root)
