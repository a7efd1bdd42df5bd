"""The drift settings (``export.drift`` in a recipe, ``settings`` in a bundle's reference): light, so the recipe's
export section can hold them without importing numpy."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.config import doc


@dataclass(frozen=True)
class DriftSettings:
    """How the reference is binned and when a window's drift raises an alarm: the recipe's ``export.drift``, stored
    in the bundle's reference (docs/monitoring.md says where each default comes from)."""

    psi_alarm: float = doc(
        "PSI above which a series alarms (credit-scoring convention: < 0.1 stable, 0.1-0.2 moderate, > 0.2 shifted)",
        0.2,
    )
    psi_warn: float = doc("PSI above which a series is reported as 'warn' (the same convention's 0.1)", 0.1)
    alpha: float = doc(
        "false-alarm level of a whole window when nothing drifted, split over its series: a series alarms only when "
        "its PSI also exceeds what sampling alone reaches at that level (chi-square bound, docs/monitoring.md)",
        0.01,
    )
    window: int = doc("answers a rolling window holds (serve's /drift; monitor's windows)", 500, minimum=10)
    min_count: int = doc("answers a series needs in the window before it may alarm", 200)
    bins: int = doc("quantile bins of a continuous series' reference (deciles)", 10, minimum=2)

    def __post_init__(self) -> None:
        checks = (
            ("psi_warn", 0.0 < self.psi_warn <= self.psi_alarm, "in (0, psi_alarm]"),
            ("psi_alarm", 0.0 < self.psi_alarm < 100.0, "in (0, 100)"),
            ("alpha", 0.0 < self.alpha < 1.0, "in (0, 1)"),
            ("window", 10 <= self.window <= 1_000_000, "an integer in [10, 1000000]"),
            ("min_count", 1 <= self.min_count <= self.window, "an integer in [1, window]"),
            ("bins", 2 <= self.bins <= 100, "an integer in [2, 100]"),
        )
        for name, ok, meaning in checks:
            if not ok:
                raise ValueError(f"'drift.{name}' must be {meaning}, got {getattr(self, name)!r}")
