"""``api_key_secret``: resolution, once per process, errors without values, and a whole run with a fake source.

The real Google Secret Manager call is not exercised here (no network, no credentials):
everything up to it runs against a fake ``SecretSource`` behind the same interface.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from beameval.config.access import EndpointAccess
from beameval.config.schema import parse_config
from beameval.core.errors import ConfigError
from beameval.secrets import GoogleSecretManager, SecretSource, read_secret, use_secret_source
from beameval.secrets.google import _explain

NAME = "projects/my-proj/secrets/openai-key/versions/3"
KEY = "sk-from-secret-manager-7f3a9c"


class FakeSource:
    """Answers from a dict and counts calls per name."""

    def __init__(self, values: dict[str, str], fail: Exception | None = None) -> None:
        self.values = values
        self.fail = fail
        self.calls: list[str] = []

    def access(self, name: str) -> str:
        self.calls.append(name)
        if self.fail is not None:
            raise self.fail
        return self.values[name]


@pytest.fixture(autouse=True)
def fresh_source():
    yield
    use_secret_source(None)  # back to Google's, and no value kept for the next test


def test_fake_is_a_secret_source() -> None:
    assert isinstance(FakeSource({}), SecretSource)
    assert isinstance(GoogleSecretManager(), SecretSource)


def test_secret_is_read_once_per_process_for_every_endpoint_and_thread(monkeypatch) -> None:
    fake = FakeSource({NAME: KEY})
    use_secret_source(fake)
    target = EndpointAccess(api_key_secret=NAME)
    judge = EndpointAccess(api_key_secret=NAME, api_key_header="x-api-key")
    seen: list[str | None] = []
    threads = [threading.Thread(target=lambda: seen.append(target.api_key())) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [KEY] * 16
    assert judge.api_key() == KEY and judge.key_headers(judge.api_key()) == {"x-api-key": KEY}
    assert target.key_headers(target.api_key()) == {"Authorization": f"Bearer {KEY}"}
    assert KEY in target.secret_values()  # the redactors get it too
    assert fake.calls == [NAME]


def test_environment_variable_wins_when_set_and_the_secret_is_the_fallback(monkeypatch) -> None:
    fake = FakeSource({NAME: KEY})
    use_secret_source(fake)
    both = EndpointAccess(api_key_env="EVAL_TEST_KEY", api_key_secret=NAME)
    monkeypatch.setenv("EVAL_TEST_KEY", "from-env")
    assert both.api_key() == "from-env" and fake.calls == []  # a laptop with the variable set: no secret read
    monkeypatch.setenv("EVAL_TEST_KEY", "")
    assert both.api_key() == KEY  # an empty variable counts as unset
    monkeypatch.delenv("EVAL_TEST_KEY")
    assert both.api_key() == KEY and fake.calls == [NAME]
    assert EndpointAccess().api_key() is None


def test_a_failed_read_is_not_kept_and_names_no_value() -> None:
    fake = FakeSource({NAME: KEY}, fail=ConfigError(f"cannot read the secret {NAME!r}: permission denied"))
    use_secret_source(fake)
    with pytest.raises(ConfigError, match="permission denied"):
        EndpointAccess(api_key_secret=NAME).api_key()
    fake.fail = None
    assert read_secret(NAME) == KEY  # retried, not cached as a failure
    assert fake.calls == [NAME, NAME]


def test_an_empty_secret_is_refused() -> None:
    use_secret_source(FakeSource({NAME: ""}))
    with pytest.raises(ConfigError, match="is empty"):
        read_secret(NAME)


@pytest.mark.parametrize(
    "bad",
    [
        "openai-key",
        "projects/p/secrets/s",
        "projects/p/secrets/s/versions/",
        "projects/p/secrets/s/versions/0",
        "projects/p/secrets/s/versions/latest/extra",
        "sk-live-key-pasted-by-mistake",
    ],
)
def test_config_refuses_anything_but_a_secret_version_name(bad: str) -> None:
    config = {
        "dataset": {"path": "x.jsonl"},
        "target": {"model": {"url": "http://127.0.0.1:1/v1", "name": "m", "api_key_secret": bad}},
        "metrics": [{"type": "exact-match", "reference": "{{ item.a }}"}],
    }
    with pytest.raises(ConfigError) as caught:
        parse_config(config, source="test")
    message = str(caught.value)
    assert "api_key_secret" in message and "projects/PROJECT/secrets/NAME/versions/VERSION" in message


def test_latest_and_numbered_versions_are_accepted_on_every_endpoint_kind() -> None:
    for version in ("latest", "12"):
        name = f"projects/p-1/secrets/key_2/versions/{version}"
        config = parse_config(
            {
                "dataset": {"path": "x.jsonl"},
                "target": {"model": {"url": "http://127.0.0.1:1/v1", "name": "m", "api_key_secret": name}},
                "prompt_template": "{{ item.q }}",
                "metrics": [
                    {
                        "type": "llm-judge",
                        "model": {"url": "http://127.0.0.1:1/v1", "name": "j", "api_key_secret": name},
                        "scores": [{"name": "quality", "minimum": 1, "maximum": 5}],
                    }
                ],
            },
            source="test",
        )
        assert config.target is not None and config.target.endpoint.api_key_secret == name
        assert config.metrics[0].model.api_key_secret == name


def test_google_source_without_the_client_library_names_the_gcp_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.secretmanager", None)  # import fails as if not installed
    with pytest.raises(ConfigError) as caught:
        GoogleSecretManager().access(NAME)
    assert "[gcp]" in str(caught.value) and NAME in str(caught.value)


def test_google_errors_are_translated_to_one_paragraph_naming_the_role() -> None:
    def error(kind: str) -> Exception:
        return type(kind, (Exception,), {})("403 Permission 'secretmanager.versions.access' denied")

    assert "roles/secretmanager.secretAccessor" in _explain(NAME, error("PermissionDenied"))
    assert "does not exist" in _explain(NAME, error("NotFound"))
    assert "gcloud auth application-default login" in _explain(NAME, error("DefaultCredentialsError"))
    assert _explain(NAME, error("DeadlineExceeded")).startswith(f"cannot read the secret {NAME!r}: DeadlineExceeded")


def test_online_run_authenticates_with_the_secret_and_writes_it_nowhere(
    clean_server, model_target, write_jsonl, run_eval, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    clean_server.configure(api_key=KEY)  # 401 without "Authorization: Bearer KEY"
    fake = FakeSource({NAME: KEY})
    use_secret_source(fake)  # the in-memory runner's workers run in this process, so they see it
    rows = [{"question": f"answer {i}", "answer": f"answer {i}" if i % 4 else "other"} for i in range(12)]
    config = {
        "dataset": {"path": str(write_jsonl(rows))},
        "target": model_target(api_key_secret=NAME),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": 4, "max_retries": 1},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 12, "ok": 12, "errors": 0}
    assert result.score("exact-match.exact-match")["sum"] == 9.0  # the server echoes; rows 0, 4, 8 expect "other"
    assert fake.calls == [NAME]  # preflight and workers share one read
    assert clean_server.stats()["by_status"].get("401", 0) == 0
    leaked = [str(p) for p in result.output.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == [] and KEY not in result.stdout + result.stderr
    # The wrong key is caught by the preflight: exit 2, the secret's name in the hint, not its value.
    use_secret_source(FakeSource({NAME: "sk-wrong"}))
    wrong = run_eval(config)
    assert wrong.code == 2 and "HTTP 401" in wrong.stderr and "sk-wrong" not in wrong.stderr
