"""The optional embedded generator `gemma3`: joining its part packages (found, not imported), the sha256 check, the
one conversion, the install hint when absent, and how `doctor` / `asset_report` list it. Fake packages only."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pytest

from workbench import assets
from workbench.core.errors import AssetError

SPEC = assets.SPLIT_GGUFS["gemma3"]
CHUNKS = [b"GGUF-first-", b"second-", b"third-", b"fourth"]


def _fake_packages(root: Path, chunks: list[bytes], sha256: str | None = None) -> None:
    """The main package (checksum file, and an ``__init__`` that fails if imported) and the four part packages."""
    digest = sha256 or hashlib.sha256(b"".join(chunks)).hexdigest()
    main = root / SPEC.module
    (main / "data").mkdir(parents=True)
    (main / "__init__.py").write_text("raise RuntimeError('asset packages must not be imported')\n")
    (main / SPEC.checksums).write_text(f"{digest}  {SPEC.filename}\n")
    for (module, _, part_file), chunk in zip(SPEC.parts, chunks, strict=True):
        (root / module / "data").mkdir(parents=True)
        (root / module / "__init__.py").write_text("raise RuntimeError('asset packages must not be imported')\n")
        (root / module / part_file).write_bytes(chunk)


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """A site directory on sys.path for the fake packages, and a private workbench cache."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    yield site
    importlib.invalidate_caches()


@pytest.fixture
def fake_convert(monkeypatch):
    """Replace the (slow, real-GGUF) dequantisation: record the joined bytes and write a config.json."""
    calls: list[bytes] = []

    def dequantise(gguf: Path, out: Path) -> None:
        calls.append(gguf.read_bytes())
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(assets, "_dequantise", dequantise)
    return calls


def test_parts_are_joined_in_order_checked_and_converted_once(fake_site, fake_convert):
    _fake_packages(fake_site, CHUNKS)
    resolved = assets.resolve_generator("gemma3")
    assert fake_convert == [b"".join(CHUNKS)]  # part1..part4 in order
    target = Path(resolved.path)
    assert resolved.source == "embedded:gemma3" and (target / "config.json").is_file()
    assert json.loads((target / assets.MODEL_META_FILE).read_text()) == {"prompt_format": "completion"}
    assert assets.declared_prompt_format(target) == "completion"
    assert not list(target.parent.rglob("*.gguf")) and not list(target.parent.glob(".*tmp"))  # joined file dropped

    again = assets.resolve_generator("gemma3")
    assert again == resolved and len(fake_convert) == 1  # converted once


def test_chunks_out_of_order_fail_the_sha256(fake_site, fake_convert):
    _fake_packages(fake_site, CHUNKS, sha256=hashlib.sha256(b"".join(reversed(CHUNKS))).hexdigest())
    with pytest.raises(AssetError, match="joined GGUF has sha256") as err:
        assets.resolve_generator("gemma3")
    assert "\n" not in str(err.value) and fake_convert == []
    models = Path(assets.cache_dir("models"))
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []  # nothing half-written


def test_a_missing_part_package_gives_the_install_hint(fake_site, fake_convert, monkeypatch):
    _fake_packages(fake_site, CHUNKS)
    absent = SPEC.parts[3][0]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        assets.importlib.util, "find_spec", lambda name, *a: None if name == absent else real_find_spec(name, *a)
    )
    with pytest.raises(AssetError) as err:
        assets.resolve_generator("gemma3")
    message = str(err.value)
    assert "pip install 'workbench[gemma]'" in message and "Gemma Terms of Use" in message
    assert "\n" not in message and fake_convert == []


def test_without_the_packages_gemma3_is_optional_in_the_asset_report(monkeypatch):
    real_find_spec = importlib.util.find_spec
    gemma_modules = {SPEC.module, *(m for m, _, _ in SPEC.parts)}
    monkeypatch.setattr(
        assets.importlib.util,
        "find_spec",
        lambda name, *a: None if name in gemma_modules else real_find_spec(name, *a),
    )
    with pytest.raises(AssetError, match=r"pip install 'workbench\[gemma\]'"):
        assets.resolve_generator("gemma3")
    rows = {row["asset"]: row for row in assets.asset_report()}
    assert rows["gemma3"]["optional"] == "yes"
    assert rows["gemma3"]["status"] == "not installed (optional: pip install 'workbench[gemma]')"
    assert rows["smollm2"]["optional"] == ""


def test_doctor_does_not_count_an_absent_optional_asset_as_missing(monkeypatch, capsys):
    from workbench import doctor

    rows = [
        {"asset": "smollm2", "package": "p", "status": "ok", "path": "", "version": "", "optional": ""},
        {"asset": "gemma3", "package": "g", "status": "not installed (optional: x)", "path": "", "version": "",
         "optional": "yes"},
    ]  # fmt: skip
    monkeypatch.setattr(doctor, "asset_report", lambda: rows)
    doctor.run_doctor()
    assert "asset gemma3" not in capsys.readouterr().out
    rows[0]["status"] = "MISSING"
    doctor.run_doctor()
    assert "asset smollm2" in capsys.readouterr().out


def test_with_the_packages_the_report_checks_every_part(fake_site):
    _fake_packages(fake_site, CHUNKS)
    row = {r["asset"]: r for r in assets.asset_report()}["gemma3"]
    assert row["status"] == "ok" and row["path"].endswith(SPEC.checksums)
    (fake_site / SPEC.parts[2][0] / SPEC.parts[2][2]).unlink()
    row = {r["asset"]: r for r in assets.asset_report()}["gemma3"]
    assert row["status"] == "MISSING FILE"


def test_expected_sha256_reads_the_checksum_file(tmp_path):
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'a' * 64}  other.gguf\n{'B' * 64} *{SPEC.filename}\n")
    assert assets.expected_sha256(sums, SPEC.filename) == "b" * 64
    with pytest.raises(AssetError, match=r"no sha256 for 'x\.gguf'"):
        assets.expected_sha256(sums, "x.gguf")
