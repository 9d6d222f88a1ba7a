"""API keys held in a secret store instead of the workers' environment (``api_key_secret``).

    SecretSource             the small interface: ``access(name) -> str``
    ├── GoogleSecretManager  Google Secret Manager (``gcp`` extra, imported lazily)
    └── (tests)              a fake behind the same interface

``read_secret`` reads each secret once per process (every DoFn thread and every endpoint
shares the value) from the source set with ``use_secret_source``, Google's by default.
"""

from beameval.secrets.google import GoogleSecretManager
from beameval.secrets.source import SECRET_NAME, SecretSource, read_secret, secret_name, use_secret_source

__all__ = ["SECRET_NAME", "GoogleSecretManager", "SecretSource", "read_secret", "secret_name", "use_secret_source"]
