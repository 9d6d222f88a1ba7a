"""Google Secret Manager behind ``SecretSource``: the real call, imported lazily (``gcp`` extra).

Not exercised by the tests (they have no network and no Google credentials): they drive
the same resolution through a fake source. The caller's service account (on Dataflow, the
worker service account) needs ``roles/secretmanager.secretAccessor`` on the secret.
"""

from __future__ import annotations

from typing import Any

from beameval.core.errors import ConfigError

__all__ = ["GoogleSecretManager"]

_ROLE = "roles/secretmanager.secretAccessor"


class GoogleSecretManager:
    """Reads secret versions with ``google-cloud-secret-manager``'s client (created on first use)."""

    def __init__(self) -> None:
        self._client: Any = None

    def access(self, name: str) -> str:
        """The UTF-8 payload of secret version ``name``.

        Raises:
            ConfigError: the client library is missing, or the version cannot be read.
        """
        try:
            from google.cloud import secretmanager
        except ImportError:
            raise ConfigError(
                f"api_key_secret {name!r} needs Google's Secret Manager client, which is not installed; "
                "install the evaluator with the gcp extra: pip install 'beam-llm-evaluator[gcp]' "
                "(or pip install '.[gcp]')."
            ) from None
        try:
            if self._client is None:
                self._client = secretmanager.SecretManagerServiceClient()
            response = self._client.access_secret_version(name=name)
            return str(response.payload.data.decode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - google.api_core's tree, translated here and only here
            raise ConfigError(_explain(name, exc)) from None


def _explain(name: str, exc: Exception) -> str:
    """One paragraph for a failed read; Google's exception names, never a payload, reach the message."""
    kind = type(exc).__name__
    if kind in ("PermissionDenied", "Forbidden", "Unauthenticated"):
        return (
            f"cannot read the secret {name!r}: permission denied ({kind}). Grant the service account that runs "
            f"the workers (and the launcher) {_ROLE} on that secret."
        )
    if kind == "NotFound":
        return f"cannot read the secret {name!r}: it does not exist (check the project, the name and the version)."
    if kind == "DefaultCredentialsError":
        return (
            f"cannot read the secret {name!r}: no Google credentials here. Run on Google Cloud with a service "
            "account, or `gcloud auth application-default login`, or use api_key_env locally."
        )
    if isinstance(exc, UnicodeDecodeError):
        return f"the secret {name!r} is not UTF-8 text; store the API key as plain text."
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"cannot read the secret {name!r}: {kind}: {first}."
