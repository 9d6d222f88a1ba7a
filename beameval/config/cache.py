"""``cache:``: where the shared response store lives and how a run uses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from beameval.config.frozen import Frozen

__all__ = ["CacheConfig", "CacheMode", "StoreUse", "store_use"]

CacheMode = Literal["read_write", "read_only", "write_only", "off"]


class CacheConfig(Frozen):
    """The response store shared by many runs (README "Resume and caching").

    Attributes:
        path: the store's directory, local or a Beam file-system URL (``gs://bucket/prefix``).
        mode: ``read_write`` answers requests from the store and adds the run's new
            responses to it when the run completes; ``read_only`` only answers;
            ``write_only`` only adds; ``off`` ignores the store.

    """

    path: str = Field(min_length=1)
    mode: CacheMode = "read_write"


@dataclass(frozen=True)
class StoreUse:
    """How one run uses the store, after the config and the command line are combined.

    Attributes:
        path: the store's directory; None when the run uses no store.
        read: requests are answered from the store.
        write: the run's journal is added to the store when the run completes.

    """

    path: str | None = None
    read: bool = False
    write: bool = False


def store_use(config: CacheConfig | None, cache_flag: str | None, no_cache: bool) -> StoreUse:
    """Combine ``cache:`` with ``--cache PATH`` and ``--no_cache`` (the flags win).

    Args:
        config: the config's ``cache:`` section, if any.
        cache_flag: ``--cache PATH``: the store's path, in the config's mode (read_write by default).
        no_cache: ``--no_cache``: use no store at all (the run's own journal is still written).

    Returns:
        The run's use of the store.

    """
    path = cache_flag or (config.path if config is not None else None)
    mode: CacheMode = config.mode if config is not None else "read_write"
    if no_cache or path is None or mode == "off":
        return StoreUse()
    return StoreUse(
        path.rstrip("/"), read=mode in ("read_write", "read_only"), write=mode in ("read_write", "write_only")
    )
