"""Seeding of every random number generator the workbench uses."""

from __future__ import annotations

import os
import random
import sys

import numpy as np

from workbench.core.hashing import stable_hash


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy and (if it is already imported) torch, for reproducible runs.

    torch is seeded only when something has imported it already, so seeding never pays torch's import cost.
    """
    random.seed(seed)
    np.random.seed(seed % (2**32))
    os.environ["PYTHONHASHSEED"] = str(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed derived deterministically from ``seed`` and any labels (e.g. a stage name and a shard)."""

    return int(stable_hash([seed, *parts], length=8), 16) & 0x7FFFFFFF
