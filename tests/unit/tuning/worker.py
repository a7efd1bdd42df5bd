"""A study worker for the multi-process tests: ``python -m tests.unit.tuning.worker URL NAME N_TRIALS SLEEP``.

Scores a made-up quality curve (no model), sleeping ``SLEEP`` seconds per trial so workers overlap; prints nothing.
"""

from __future__ import annotations

import sys
import time


def score(params: dict, report=None) -> tuple[dict, str]:
    """Quality peaks at tau = 1; tokens grow with tau."""
    time.sleep(float(sys.argv[4]))
    tau = float(params["tau"])
    quality = 1.0 / (1.0 + (tau - 1.0) ** 2)
    return {"contains": quality, "tokens": 100.0 * tau, "retrieval_rate": min(1.0, tau / 2)}, "replay"


def main() -> None:
    from workbench.tuning.space import parse_space
    from workbench.tuning.storage import open_storage
    from workbench.tuning.study import StudySettings, run_study

    url, name, n_trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
    specs = parse_space("dtr", {"tau": {"low": 0.01, "high": 10.0, "log": True}}, "test")
    run_study(open_storage(url), name, specs, score, StudySettings(n_trials=n_trials, seed=0), progress=False)


if __name__ == "__main__":
    main()
