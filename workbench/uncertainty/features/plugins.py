"""Features from other packages: the ``workbench.features`` entry-point group (docs/adding-a-feature.md).

An installed package declares a feature in its metadata, the entry point's name being the feature's name::

    [project.entry-points."workbench.features"]
    answer_length = "toy_feature:AnswerLength"

The value is a :class:`~workbench.uncertainty.features.base.Feature` subclass (built with its defaults) or instance.
The stats it reads are stats of :data:`~workbench.uncertainty.stats.STATS` or :class:`DerivedStat` objects it brings in
its ``derived_stats``. Entry points are read only for a name that is not a built-in feature, and a plugin's module is
imported only when its name is asked for (once per process): importing the workbench, loading a recipe or a bundle
of built-in features never scans the installed packages. Loading a bundle never runs code from the bundle: a plugin
feature it names runs from the installed package, or the bundle is refused (:func:`check_recorded_plugin`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workbench.core.errors import ConfigError, DataError
from workbench.uncertainty.features.base import CATEGORIES, PLUGIN_PACKAGES, Feature
from workbench.uncertainty.stats import STATS, register_derived_stat

ENTRY_POINT_GROUP = "workbench.features"
"""The entry-point group a package declares its features in."""

FEATURE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""A feature's name: a lower-case identifier (it becomes a column of the collection and a key of the manifest)."""

_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # PEP 508 distribution names
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$")

_LOADED: dict[str, Feature] = {}


def _entry_points() -> list[Any]:
    """The installed packages' entry points in :data:`ENTRY_POINT_GROUP`."""
    # read on demand only: importlib.metadata and the scan of every installed package's metadata cost tens of ms,
    # which neither `import workbench.runtime` nor a recipe of built-in features pays
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINT_GROUP))


def plugin_names() -> list[str]:
    """The names of the features the installed packages declare (read from their metadata; nothing is imported)."""
    return sorted({ep.name for ep in _entry_points()})


def _package(ep: Any) -> dict[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return {"name": "unknown", "version": "unknown"}
    return {"name": str(dist.name), "version": str(dist.version)}


def load_plugin(name: str) -> Feature | None:
    """The feature an installed package declares under ``name`` (loaded once), or None when none does.

    ConfigError naming the entry point when two packages declare ``name``, or when the plugin fails to import, is not
    a :class:`Feature`, names itself otherwise, or breaks the feature contract (orientation ±1, a known category, a
    version, stats that exist).
    """
    if name in _LOADED:
        return _LOADED[name]
    if not isinstance(name, str) or not FEATURE_NAME.match(name):
        return None
    found = [ep for ep in _entry_points() if ep.name == name]
    if not found:
        return None
    if len(found) > 1:
        packages = sorted(_package(ep)["name"] for ep in found)
        raise ConfigError(f"feature {name!r} is declared by several packages: {packages}", ENTRY_POINT_GROUP)
    ep = found[0]
    package = _package(ep)
    where = (
        f"entry point '{ep.name} = {ep.value}' ({ENTRY_POINT_GROUP}, package {package['name']} {package['version']})"
    )
    try:
        target = ep.load()
        feature = target() if isinstance(target, type) and issubclass(target, Feature) else target
    except Exception as exc:  # any failure inside the plugin's own code is the plugin's: one line naming it
        raise ConfigError(f"the feature plugin failed to load ({type(exc).__name__}: {exc})", where) from None
    _check_plugin(feature, name, where)
    for stat in type(feature).derived_stats:
        register_derived_stat(stat, where)
    PLUGIN_PACKAGES[name] = package
    _LOADED[name] = feature
    return feature


def _check_plugin(feature: Any, name: str, where: str) -> None:
    """Refuse (ConfigError at ``where``) a plugin object that breaks the feature contract."""
    if not isinstance(feature, Feature):
        raise ConfigError(f"names a {type(feature).__name__}, not a Feature subclass or instance", where)
    if feature.name != name:
        raise ConfigError(f"the feature calls itself {feature.name!r}: the entry point must be named so", where)
    if getattr(feature, "orientation", None) not in (1, -1):
        raise ConfigError("orientation must be +1 or -1 (after orientation, higher = more certain)", where)
    if getattr(feature, "category", None) not in CATEGORIES:
        raise ConfigError(f"category must be one of {list(CATEGORIES)}", where)
    if not isinstance(feature.version, str) or not _VERSION.match(feature.version):
        raise ConfigError("version must be a short string such as '1' (bump it when the value can change)", where)
    if not isinstance(feature.requires_gold, bool):
        raise ConfigError("requires_gold must be True or False", where)
    derived = type(feature).derived_stats
    own = {getattr(stat, "name", None) for stat in derived}
    stats = getattr(feature, "stats", None)
    if not isinstance(stats, tuple) or not stats or not all(isinstance(s, str) for s in stats):
        raise ConfigError("stats must be a non-empty tuple of stat names", where)
    unknown = sorted(set(stats) - set(STATS) - own)
    if unknown:
        raise ConfigError(f"needs stat(s) {unknown} that are neither built in nor in its derived_stats", where)


def _normalised(package: str) -> str:
    """A distribution name as PEP 503 compares them (case, and runs of ``-_.``, folded)."""
    return re.sub(r"[-_.]+", "-", package).lower()


def check_recorded_plugin(record: Mapping[str, Any], builtin: Mapping[str, Feature], where: str) -> None:
    """Refuse (DataError at ``where``) a bundle's feature record from a plugin package (``record["package"]``) that
    this installation cannot run as it was collected: no installed package declares it (the message names the
    feature and the package to install), the name is a built-in feature here, another package declares it, or the
    installed feature has another version. A record without ``package`` (a built-in feature) passes. Only the
    installed package's code runs; the record's strings are echoed only when they are well-formed names."""
    package = record.get("package")
    if package is None:
        return
    name = record.get("name")
    shown = repr(name) if isinstance(name, str) and FEATURE_NAME.match(name) else "(an invalid name)"
    if not isinstance(package, Mapping):
        raise DataError(f"feature {shown}: 'package' must be a mapping of name and version", where)
    pkg, ver = package.get("name"), package.get("version")
    pkg = pkg if isinstance(pkg, str) and _PACKAGE_NAME.match(pkg) else "(an invalid package name)"
    ver = ver if isinstance(ver, str) and _VERSION.match(ver) else "(an invalid version)"
    if name in builtin:
        raise DataError(f"feature {shown} is built in here, but the bundle took it from the package {pkg} {ver}", where)
    feature = load_plugin(name) if shown != "(an invalid name)" else None
    if feature is None:
        raise DataError(
            f"feature {shown} comes from the package {pkg} {ver}, which is not installed: install it to load this "
            "bundle",
            where,
        )
    installed = PLUGIN_PACKAGES[name]
    if _normalised(installed["name"]) != _normalised(pkg):
        raise DataError(
            f"feature {shown} comes from the package {installed['name']} here, but the bundle took it from {pkg} "
            f"{ver}: install {pkg} {ver} instead",
            where,
        )
    recorded = record.get("version")
    if str(feature.version) != str(recorded):
        recorded = recorded if isinstance(recorded, str) and _VERSION.match(recorded) else "(an invalid version)"
        raise DataError(
            f"feature {shown} is version {recorded} in the bundle (package {pkg} {ver}) but version {feature.version} "
            f"in the installed package {installed['name']} {installed['version']}: install {pkg} {ver}, or re-export",
            where,
        )
