"""Which device a backend runs on: a device setting (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``) checked by its
syntax (no torch needed, so a recipe is checked on any machine) and resolved against this machine.

Every backend that places a model (generator, embedder, NLI judges, retrievers through their embedder) and the
factory that builds them import this module; it imports no backend.
"""

from __future__ import annotations

import re
from typing import Any

from workbench.core.errors import ConfigError

DEVICES = "auto, cpu, cuda, cuda:N or mps"
"""The device settings a recipe or bundle may give (for error messages)."""
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_device(device: Any, key: str = "device") -> None:
    """Refuse a device string that is not one of :data:`DEVICES` with a one-line :class:`ConfigError` naming
    ``key``. Syntax only: torch is not imported, so a recipe is checked on any machine."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise ConfigError(f"unknown device {device!r} (use {DEVICES})", key)


def resolve_device(device: str, key: str = "device") -> str:
    """The torch device to use for ``device``: ``"auto"`` → ``"cuda"`` when torch sees a GPU, else ``"cpu"``.

    Every other value is checked first (:func:`check_device`), then against this machine: ``cuda`` / ``cuda:N``
    need a GPU with that index, ``mps`` an available MPS backend. A device that cannot work is a one-line
    :class:`ConfigError` naming ``key``, never a torch traceback."""
    check_device(device, key)
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("'mps' but torch sees no MPS backend on this machine (use cpu or auto)", key)
        return device
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.partition(":")[2] or 0)
    if index >= count:
        seen = f"{count} GPU(s), cuda:0 to cuda:{count - 1}" if count else "no GPU (CUDA not available)"
        raise ConfigError(f"{device!r} but torch sees {seen}; use cpu or auto", key)
    return device
