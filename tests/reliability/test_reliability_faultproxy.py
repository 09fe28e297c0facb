"""The fault proxy itself: each fault does what it says, before or after the server applies
the request (checked on the S3 server directly)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shaledb.testing.faultproxy import FaultProxy

BUCKET = "shaledb-test"  # created by the session's moto fixture


def _client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=10),
    )


def _exists(endpoint: str, key: str) -> bool:
    try:
        _client(endpoint).head_object(Bucket=BUCKET, Key=key)
        return True
    except Exception:  # botocore's ClientError for a 404
        return False


@pytest.mark.parametrize(
    ("fault", "status", "applied"),
    [
        ("fail_before", 503, False),
        ("reset_before", None, False),
        ("fail_after", 500, True),
        ("reset_after", None, True),
        ("delay", 200, True),
    ],
)
def test_each_fault(moto_endpoint: str, fault: str, status: int | None, applied: bool) -> None:
    from botocore.exceptions import ClientError

    key = f"proxy/{uuid.uuid4().hex}"
    with FaultProxy(moto_endpoint, seed=1, rates={fault: 1.0}, max_delay_s=0.05) as proxy:
        client = _client(proxy.url)
        if status == 200:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"payload")
        else:
            with pytest.raises(Exception) as err:  # a ClientError or a connection error
                client.put_object(Bucket=BUCKET, Key=key, Body=b"payload")
            if status is not None:
                assert isinstance(err.value, ClientError)
                assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
            else:
                assert not isinstance(err.value, ClientError), err.value
        assert proxy.counts[fault] == 1
    assert _exists(moto_endpoint, key) == applied


def test_a_clean_proxy_relays_requests_and_bodies(moto_endpoint: str) -> None:
    key = f"proxy/{uuid.uuid4().hex}"
    with FaultProxy(moto_endpoint, seed=1) as proxy:
        client = _client(proxy.url)
        client.put_object(Bucket=BUCKET, Key=key, Body=b"x" * 100_000)
        assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"x" * 100_000
        assert proxy.faults_injected == 0 and proxy.counts["pass"] == 2


def test_fault_draws_are_seeded() -> None:
    rates = {"fail_before": 0.2, "reset_after": 0.2}
    a = FaultProxy("http://127.0.0.1:1", seed=7, rates=rates)
    b = FaultProxy("http://127.0.0.1:1", seed=7, rates=rates)
    assert [a._draw() for _ in range(200)] == [b._draw() for _ in range(200)]
    with pytest.raises(ValueError, match="unknown fault"):
        FaultProxy("http://127.0.0.1:1", seed=1, rates={"explode": 1.0})
