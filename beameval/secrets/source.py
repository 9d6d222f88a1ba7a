"""The secret-source interface, the secret-name check, and the once-per-process read.

On Dataflow a worker's environment has no API key, so an endpoint names a secret version
(``projects/P/secrets/S/versions/V``) and each worker process reads it the first time an
endpoint needs its key. The value is kept in this process's memory only: never in the
config, a log line, a message or an output (the redactors also receive it, through
``EndpointAccess.secret_values``).
"""

from __future__ import annotations

import re
import threading
from typing import Protocol, runtime_checkable

from beameval.core.errors import ConfigError

__all__ = ["SECRET_NAME", "SecretSource", "read_secret", "secret_name", "use_secret_source"]

#: A Secret Manager secret version: ``projects/P/secrets/S/versions/V`` (V a number or ``latest``).
SECRET_NAME = re.compile(r"^projects/[A-Za-z0-9_.:-]+/secrets/[A-Za-z0-9_-]+/versions/(?:[1-9][0-9]*|latest)$")


@runtime_checkable
class SecretSource(Protocol):
    """Where secret values come from: one call per secret name and process."""

    def access(self, name: str) -> str:
        """The value of secret version ``name``.

        Raises:
            ConfigError: the secret cannot be read (missing, no permission, empty); the
                message names the secret, never its value.
        """
        ...


_lock = threading.Lock()
_values: dict[str, str] = {}
_source: SecretSource | None = None


def secret_name(name: str) -> str:
    """Accept a full secret-version name (a pydantic validator).

    Raises:
        ValueError: anything but ``projects/P/secrets/S/versions/V``.
    """
    if not SECRET_NAME.match(name):
        raise ValueError(  # the value is not repeated: it may be the key itself, pasted here
            "must be a Secret Manager secret version, projects/PROJECT/secrets/NAME/versions/VERSION "
            f"(VERSION a number or 'latest'); the value given ({len(name)} characters, not repeated here) "
            "is not one. The key itself never goes in the config"
        )
    return name


def use_secret_source(source: SecretSource | None) -> None:
    """Read secrets from ``source`` from now on (``None``: Google Secret Manager); forgets values already read."""
    global _source
    with _lock:
        _source = source
        _values.clear()


def read_secret(name: str) -> str:
    """The value of secret version ``name``, read from the source once per process.

    Args:
        name: ``projects/P/secrets/S/versions/V``.

    Returns:
        The secret's value (a key: keep it out of every output).

    Raises:
        ConfigError: the source cannot give it (see ``SecretSource.access``).
    """
    with _lock:  # held during the read: many DoFn threads starting at once make one call, not one each
        if name not in _values:
            source = _source
            if source is None:
                from beameval.secrets.google import GoogleSecretManager  # the gcp extra, only when used

                source = GoogleSecretManager()
            value = source.access(name)
            if not value:
                raise ConfigError(f"the secret {name!r} is empty; add a version that holds the API key.")
            _values[name] = value
        return _values[name]
