"""Which process of a multi-process launch this is (torchrun, srun, mpirun), read from the launcher's environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from workbench.core.errors import ConfigError

RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "JSM_NAMESPACE_RANK", "LOCAL_RANK")
"""The launchers' rank variables: torchrun / torch.distributed (global ``RANK``, per-node ``LOCAL_RANK``), SLURM,
Open MPI and LSF (the launchers :func:`workbench.stages.distill.check_launch` accepts)."""


def launch_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank in a multi-process launch: the largest of the :data:`RANK_VARIABLES` that are set, so
    0 means "rank 0, or no launcher" and any other value "not the process that writes" (a process with a local
    rank above 0 is never global rank 0). ``environ`` defaults to ``os.environ``. ConfigError naming the variable
    when one is not a non-negative integer."""
    env = os.environ if environ is None else environ
    rank = 0
    for name in RANK_VARIABLES:
        value = env.get(name, "").strip()
        if not value:
            continue
        if not value.isdigit():
            raise ConfigError(f"a launcher's rank must be a non-negative integer, got {value!r}", name)
        rank = max(rank, int(value))
    return rank
