"""Shared fixtures: fresh database URLs and stores (memory, local directory), a manual
clock, an S3 API server (moto) for the session, and fresh S3 locations on it.

Nothing here touches ``os.environ``: a location carries its endpoint and
credentials as ``open_store`` options, and as an environment dict for
subprocesses (Spark workers, crash-test children) that need one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.testing.clock import ManualClock

MOTO_BUCKET = "shaledb-test"
MOTO_REGION = "us-east-1"
MOTO_KEY = "testing"


@dataclass(frozen=True)
class S3Location:
    """A fresh prefix on the session's S3 server: its URL and how to reach it."""

    url: str
    endpoint: str
    options: dict[str, Any] = field(default_factory=dict)

    def open(self, **extra: Any) -> Any:
        from shaledb.store import open_store

        return open_store(self.url, **{**self.options, **extra})

    def env(self) -> dict[str, str]:
        """The same settings as AWS_* variables, for a child process's environment."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": MOTO_REGION,
            "AWS_ACCESS_KEY_ID": MOTO_KEY,
            "AWS_SECRET_ACCESS_KEY": MOTO_KEY,
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_moto(log: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    exe = Path(sys.executable).with_name("moto_server")
    cmd = str(exe) if exe.exists() else shutil.which("moto_server")
    if cmd is None:
        pytest.fail("moto_server not found: install the test extra (make .venv/.test)")
    for _ in range(3):  # another process may grab the free port first
        port = _free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [cmd, "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=None if env is None else {**os.environ, **env},
            )
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return proc, f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.02)
        proc.kill()
        proc.wait()
    pytest.fail(f"moto_server did not start; see {log}")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto S3 server on 127.0.0.1 with bucket MOTO_BUCKET, for the session."""
    import boto3

    proc, endpoint = _start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=MOTO_REGION,
            aws_access_key_id=MOTO_KEY,
            aws_secret_access_key=MOTO_KEY,
        ).create_bucket(Bucket=MOTO_BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def moto_checking_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a second moto server that checks request signatures (refuses unknown keys);
    it has no bucket: a request with wrong keys is refused before the bucket is looked up."""
    proc, endpoint = _start_moto(
        tmp_path_factory.mktemp("moto-auth") / "moto.log", env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    )
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_url_factory(moto_endpoint: str) -> Callable[[], S3Location]:
    """Returns a callable making a new, empty S3 location (unique prefix) per call."""

    def make() -> S3Location:
        return S3Location(
            url=f"s3://{MOTO_BUCKET}/t/{uuid.uuid4().hex}",
            endpoint=moto_endpoint,
            options={
                "endpoint": moto_endpoint,
                "allow_http": True,
                "region": MOTO_REGION,
                "access_key_id": MOTO_KEY,
                "secret_access_key": MOTO_KEY,
            },
        )

    return make


@pytest.fixture
def _moto_for_machine(
    request: pytest.FixtureRequest, s3_url_factory: Callable[[], S3Location]
) -> Iterator[None]:
    """Fresh moto locations for the test module's ``S3Machine`` (a Hypothesis state machine
    takes no fixtures, so its class attribute ``locations`` carries the factory)."""
    machine = request.module.S3Machine
    machine.locations = s3_url_factory
    yield
    machine.locations = None


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def mem_url() -> Iterator[str]:
    """A fresh in-process memory store's URL, dropped afterwards."""
    name = f"t-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    drop_memory_store(name)


@pytest.fixture(params=["memory", "local"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL of each kind: a memory store, then a local directory."""
    if request.param == "memory":
        name = f"t-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        drop_memory_store(name)
    else:
        yield str(tmp_path / "db")


@pytest.fixture
def memory_store(mem_url: str) -> ObjectStore:
    """A fresh in-process memory store (dropped with ``mem_url``)."""
    return open_store(mem_url)


@pytest.fixture
def local_store(tmp_path: Path) -> ObjectStore:
    """A fresh local-directory store."""
    return open_store(str(tmp_path / "db"))


@pytest.fixture(scope="session")
def azurite_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Blob endpoint of an Azurite server on 127.0.0.1 with container AZURE_CONTAINER, for the
    session; skipped, saying why, when Azurite is not installed."""
    import emulators

    if not emulators.AZURITE.exists():
        pytest.skip(f"AZURITE NOT INSTALLED ({emulators.AZURITE} missing): {emulators.INSTALL_HINT}")
    proc, endpoint = emulators.start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        emulators.azure_create_container(endpoint, emulators.AZURE_CONTAINER)
        yield endpoint
    finally:
        emulators.stop(proc)


@pytest.fixture
def azure_url_factory(azurite_endpoint: str) -> Callable[[], Any]:
    """Returns a callable making a new, empty Azurite location (unique prefix) per call."""
    import emulators

    return lambda: emulators.azure_location(azurite_endpoint, f"t/{uuid.uuid4().hex}")


EMULATORS = ["azurite"]


@pytest.fixture(params=EMULATORS)
def emulator_url_factory(request: pytest.FixtureRequest) -> Callable[[], Any]:
    """Each emulated cloud store in turn: a callable making a new, empty location per call.
    Modules that rerun the S3 tests on the emulators override ``s3_url_factory`` with it."""
    factory: Callable[[], Any] = request.getfixturevalue({"azurite": "azure_url_factory"}[request.param])
    return factory


@pytest.fixture
def _emulator_for_machine(
    request: pytest.FixtureRequest, azure_url_factory: Callable[[], Any]
) -> Iterator[None]:
    """Azurite locations for the test module's ``S3Machine`` (see ``_moto_for_machine``)."""
    machine = request.module.S3Machine
    machine.locations = azure_url_factory
    yield
    machine.locations = None
