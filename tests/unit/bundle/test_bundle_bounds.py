"""Issue 41: every number a bundle carries for its methods and its stats has an upper bound, checked when it loads.

``standard_rag.k: 1000000`` gave 8,178-token prompts and a minute a question; ``candidates``, ``dense_pool``, ``k1``,
``samples`` and ``max_new_tokens`` of 10^9 loaded, and so did DTR's ``tau: -1e308``. Each method's settings class and
:class:`~workbench.uncertainty.stat_settings.StatSettings` own their bounds (:mod:`workbench.core.bounds`); the
manifest check calls them, so each refusal is one line naming the manifest field. The sweep below is generated from
the method table: a numeric option added without a bound fails it.
"""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from tests.unit.bundle.conftest import FIXTURE
from tests.unit.bundle.test_bundle_attacks import _manifest, _reseal
from workbench.bundle.integrity import parse_manifest
from workbench.bundle.manifest import content_digest
from workbench.core.errors import ConfigError, DataError
from workbench.methods.registry import GOLD_METHODS, METHOD_TABLE, option_fields
from workbench.runtime import load_bundle
from workbench.uncertainty.stat_settings import StatSettings

BASE = json.loads((FIXTURE / "1.0.0" / "manifest.json").read_text())


def _numeric_options() -> list[tuple[str, str, type]]:
    """``(method, option, int or float)`` of every numeric option of every method a bundle may hold."""
    out = []
    for name, entry in METHOD_TABLE.items():
        if name in GOLD_METHODS:
            continue
        hints: dict[str, typing.Any] = {}
        for cls in (entry.settings_class(), entry.options):
            if cls is not None:
                hints.update(typing.get_type_hints(cls))
        for f in option_fields(entry):
            kinds = {a for a in (typing.get_args(hints[f.name]) or (hints[f.name],)) if a in (int, float)}
            if kinds and f.name not in entry.deferred:
                out.append((name, f.name, float if float in kinds else int))
    return out


def _parsed(edit) -> dict:
    manifest = json.loads(json.dumps(BASE))
    edit(manifest)
    manifest["content_sha256"] = content_digest(manifest, manifest["files"])
    return parse_manifest(json.dumps(manifest).encode(), "manifest.json")


NUMERIC = _numeric_options()


def test_the_sweep_covers_the_options_of_the_findings():
    found = {(m, o) for m, o, _ in NUMERIC}
    for pair in [
        ("standard_rag", "k"),
        ("dense_rag", "candidates"),
        ("dtr", "dense_pool"),
        ("insemrag", "k1"),
        ("d2rag", "seper_samples"),
        ("d2rag", "max_new_tokens"),
        ("dtr", "tau"),
    ]:
        assert pair in found


@pytest.mark.parametrize(("method", "option", "kind"), NUMERIC, ids=[f"{m}.{o}" for m, o, _ in NUMERIC])
def test_every_numeric_method_option_has_an_upper_and_a_lower_bound(method, option, kind):
    field = rf"'methods\.{method}\.options\.{option}'"
    for value in (10**12, -(10**12)) if kind is int else (1e300, -1e300):
        with pytest.raises(DataError, match=field) as refused:
            _parsed(lambda m, v=value: m["methods"].update({method: {"options": {option: v}, "requires_gold": False}}))
        assert "\n" not in str(refused.value)


STATS = [f.name for f in dataclasses.fields(StatSettings) if f.type in ("int", "float", "int | None")]


@pytest.mark.parametrize("setting", STATS)
def test_every_numeric_stats_setting_is_bounded(setting):
    assert {"samples", "max_new_tokens", "temperature", "paraphrases"} <= set(STATS)
    for value in (10**12, 1e300, "many"):
        with pytest.raises(DataError, match=rf"'stats\.settings': bad stats settings: stats\.{setting}: "):
            _parsed(lambda m, v=value: m["stats"]["settings"].update({setting: v}))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["methods"]["standard_rag"]["options"].update(k=10**6), r"options\.k': k must be at most 100"),
        (
            lambda m: m["methods"].update(dtr={"options": {"tau": -1e308}, "requires_gold": False}),
            r"options\.tau': tau must be in \[-100, 100\], got -1e\+308",
        ),
        (
            lambda m: m["methods"].update(insemrag={"options": {"k1": 10**9}, "requires_gold": False}),
            r"options\.k1': k1 must be at most 1000",
        ),
        (lambda m: m["stats"]["settings"].update(samples=10**9), r"stats\.samples: samples must be at most 100"),
        (lambda m: m["methods"]["d2rag"]["options"].update(stats={"samples": 10**9}), r"d2rag\.options\.stats'"),
        (lambda m: m["methods"]["d2rag"]["options"].update(stats=7), r"stats must be a mapping of stats settings"),
    ],
    ids=["standard_rag.k", "dtr.tau", "insemrag.k1", "stats.samples", "d2rag.stats", "d2rag.stats-type"],
)
def test_the_findings_are_refused_at_load_in_one_line(bundle, edit, message):
    manifest = _manifest(bundle)
    edit(manifest)
    _reseal(bundle, manifest)
    with pytest.raises(DataError, match=message) as refused:
        load_bundle(bundle)
    assert str(refused.value).startswith(str(bundle / "manifest.json")) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [("1" + "0" * 5000, "an integer of more than 40 digits"), ("1e999", "a number too large for a float")],
)
def test_a_number_json_cannot_hold_in_range_is_one_line(bundle, text, message):
    path = bundle / "manifest.json"
    path.write_text(path.read_text().replace('"seed": 0', f'"seed": {text}'))
    with pytest.raises(DataError, match=message):
        load_bundle(bundle)


def test_an_override_past_a_bound_is_refused_too(bundle):
    with pytest.raises(ConfigError, match="k must be at most 100"):
        load_bundle(bundle, {"methods": {"standard_rag": {"k": 10**6}}})
