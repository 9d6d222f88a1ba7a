import json
import random
import ssl
from datetime import datetime, timezone
from email.utils import format_datetime

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.http_exceptions import ContentEncodingError

from beameval.inference.backoff import backoff_delay, retry_wait
from beameval.inference.classify import Failure, classify, parse_retry_after, redact, safe_url
from beameval.inference.errors import EmptyAnswerError, MalformedResponseError, UnusableResponseError

URL = "http://127.0.0.1:9/v1/chat/completions"
KEY = ConnectionKey("127.0.0.1", 9, False, True, None, None, None)


def connector_error(os_error: OSError) -> aiohttp.ClientConnectorError:
    return aiohttp.ClientConnectorError(KEY, os_error)  # type: ignore[arg-type]


def payload_error_from_bad_encoding() -> aiohttp.ClientPayloadError:
    try:
        raise ContentEncodingError("Can not decode content-encoding: gzip")
    except ContentEncodingError as cause:
        error = aiohttp.ClientPayloadError("Response payload is not completed")
        error.__cause__ = cause
        return error


def certificate_error() -> aiohttp.ClientConnectorCertificateError:
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    cause.verify_message = "self-signed certificate"
    return aiohttp.ClientConnectorCertificateError(KEY, cause)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (429, "hard_overload", True),
        (503, "hard_overload", True),
        (408, "transient", True),
        (500, "transient", True),
        (502, "transient", True),
        (504, "transient", True),
        (400, "fatal", False),
        (401, "fatal", False),
        (403, "fatal", False),
        (404, "fatal", False),
        (409, "fatal", False),
        (422, "fatal", False),
        (501, "fatal", False),
    ],
)
def test_status_table(status, kind, retryable):
    failure = classify(status, url=URL)
    assert (failure.failure_class, failure.retryable, failure.status) == (kind, retryable, status)
    assert f"HTTP {status}" in failure.message and URL in failure.message


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (aiohttp.ServerTimeoutError("Timeout on reading data from socket"), "soft_overload"),
        (aiohttp.SocketTimeoutError("socket"), "soft_overload"),
        (TimeoutError(), "soft_overload"),
        (aiohttp.ConnectionTimeoutError("Connection timeout to host"), "transient"),
        (connector_error(ConnectionRefusedError(111, "Connection refused")), "transient"),
        (aiohttp.ServerDisconnectedError(), "transient"),
        (aiohttp.ClientOSError(104, "Connection reset by peer"), "transient"),
        (aiohttp.ClientPayloadError("Response payload is not completed"), "transient"),
        (aiohttp.ClientResponseError(None, (), status=400, message="invalid character in header"), "transient"),  # type: ignore[arg-type]
        (ConnectionResetError(104, "Connection reset by peer"), "transient"),
        (ConnectionRefusedError(111, "Connection refused"), "transient"),
        (json.JSONDecodeError("Expecting value", "not json", 0), "transient"),
        (MalformedResponseError("it has no choices"), "transient"),
        (EmptyAnswerError("the model returned an empty answer"), "fatal"),
        (UnusableResponseError("no match"), "fatal"),
        (aiohttp.InvalidURL("ftp://host"), "fatal"),
        (aiohttp.NonHttpUrlClientError("ftp://host"), "fatal"),
        (payload_error_from_bad_encoding(), "fatal"),
        (certificate_error(), "fatal"),
        (ValueError("boom"), "fatal"),
    ],
)
def test_exception_table(exc, kind):
    failure = classify(exc, url=URL)
    assert failure.failure_class == kind
    assert failure.retryable == (kind != "fatal")
    assert failure.status is None
    assert "\n" not in failure.message


def test_connection_refused_message_names_host():
    failure = classify(connector_error(ConnectionRefusedError(111, "Connection refused")), url=URL)
    assert failure.message == "connection refused by 127.0.0.1:9 (is the server running?)"


def test_certificate_failure_is_not_retried_and_names_host_and_reason():
    failure = classify(certificate_error(), url=URL)
    assert (failure.failure_class, failure.retryable) == ("fatal", False)
    assert (
        failure.message
        == "TLS with 127.0.0.1:9 failed: the server's certificate did not verify (self-signed certificate)"
    )
    assert failure.tls


def test_empty_answer_message():
    failure = classify(EmptyAnswerError("the model returned an empty answer"), url=URL)
    assert failure.message.startswith("the model returned an empty answer")
    assert not failure.retryable


def test_retry_after_is_read_from_headers():
    failure = classify(503, url=URL, headers={"retry-after": "1"})
    assert failure.retry_after == 1.0
    assert failure.message == f"HTTP 503 Service Unavailable from {URL} (retry-after 1s)"


def test_fatal_status_quotes_body_excerpt_on_one_line():
    body = b'{"error": {"message": "bad\nrequest"}}' + b"x" * 500
    failure = classify(400, url=URL, body=body)
    assert failure.message.startswith(f'HTTP 400 Bad Request from {URL}: {{"error": {{"message": "bad request')
    assert "\n" not in failure.message
    assert len(failure.message) < len(URL) + 260


def test_messages_never_hold_secrets():
    key = "sk-live-ABCDEFGHIJKLMNOP"
    body = f"Incorrect API key provided: {key}; Authorization: Bearer {key}".encode()
    failure = classify(401, url=URL + "?api_key=s3cr3t&v=1", body=body, secrets=(key,))
    assert key not in failure.message
    assert "s3cr3t" not in failure.message
    assert "v=1" in failure.message


def test_redact_and_safe_url():
    assert redact("Bearer abc.def ok") == "Bearer *** ok"
    assert redact("key nvapi-1234567890abc") == "key nvapi-***"
    assert redact("nothing here") == "nothing here"
    assert safe_url("https://user:pw@h/v1?token=x&a=b") == "https://h/v1?token=***&a=b"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1.0),
        ("0.5", 0.5),
        (" 2 ", 2.0),
        ("-3", 0.0),
        ("0", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_parse_retry_after_seconds(value, expected):
    assert parse_retry_after(value, now=1000.0) == expected


def test_parse_retry_after_http_date():
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=timezone.utc).timestamp()
    later = format_datetime(datetime(2030, 1, 1, 12, 0, 30, tzinfo=timezone.utc), usegmt=True)
    earlier = format_datetime(datetime(2030, 1, 1, 11, 0, 0, tzinfo=timezone.utc), usegmt=True)
    assert parse_retry_after(later, now=now) == pytest.approx(30.0)
    assert parse_retry_after(earlier, now=now) == 0.0
    assert parse_retry_after("Mon, 99 Foo 2030 00:00:00 GMT", now=now) is None


class _FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def test_backoff_bounds():
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = min(15.0, 0.25 * 2 ** (attempt - 1))
        for _ in range(200):
            assert 0.0 <= backoff_delay(attempt, rng) < ceiling
    assert backoff_delay(1, _FixedRng(0.999999)) == pytest.approx(0.25, rel=1e-5)
    assert backoff_delay(3, _FixedRng(0.5)) == pytest.approx(0.5)
    assert backoff_delay(10_000, _FixedRng(0.5)) == pytest.approx(7.5)
    assert backoff_delay(0, _FixedRng(0.5)) == pytest.approx(0.125)


def test_retry_wait_never_below_retry_after():
    hard = Failure("hard_overload", True, 2.0, 429, "HTTP 429")
    assert retry_wait(hard, 1, _FixedRng(0.99)) == 2.0
    assert retry_wait(hard, 10, _FixedRng(0.99)) == pytest.approx(0.99 * 15.0)
    plain = Failure("transient", True, None, 500, "HTTP 500")
    assert retry_wait(plain, 2, _FixedRng(0.5)) == pytest.approx(0.25)


def test_malformed_message_names_the_url():
    failure = classify(MalformedResponseError("it has no choices"), url=URL)
    assert failure.message == f"malformed reply from {URL}: it has no choices"
    failure = classify(json.JSONDecodeError("Expecting value", "<html>", 0), url=URL)
    assert failure.message == f"malformed reply from {URL}: the body is not valid JSON (Expecting value)"
