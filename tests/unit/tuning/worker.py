"""A study worker for the multi-process tests: ``python -m tests.unit.tuning.worker URL NAME N_TRIALS SLEEP [HOLD]``.

Scores a made-up quality curve (no model), sleeping ``SLEEP`` seconds per trial so workers overlap; prints nothing.
With ``HOLD`` (a file path), the second trial it scores creates that file and then waits to be killed: a test that
kills the worker mid-trial waits for the file instead of racing the trials by polling the storage.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

_SCORED = [0]


def score(params: dict, report=None) -> tuple[dict, str]:
    """Quality peaks at tau = 1; tokens grow with tau."""
    _SCORED[0] += 1
    if len(sys.argv) > 5 and _SCORED[0] == 2:  # inside a stamped trial with its parameters, one trial complete
        Path(sys.argv[5]).touch()
        time.sleep(600)  # until the test kills the process
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
