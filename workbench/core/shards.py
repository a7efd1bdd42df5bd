"""Shards of a row-wise job (``collect``, ``score``): ``"i/N"`` takes the rows whose position mod N == i."""

from __future__ import annotations

from workbench.core.errors import ConfigError


def parse_shard(text: str, where: str) -> tuple[int, int]:
    """``"i/N"`` → ``(i, N)`` with 0 <= i < N; anything else raises :class:`ConfigError` at ``where``."""
    try:
        index, count = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ConfigError(f"shard must look like 'i/N', got {text!r}", where) from None
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard {text!r} needs 0 <= i < N", where)
    return index, count
