"""The manifest envelope: a versioned, checksummed container for a JSON body.

Layout::

    4 bytes magic "SHMF"
    u16 format_version (1)
    u16 flags (0)
    u32 body_len
    body_len bytes of UTF-8 JSON (one object, keys sorted, no whitespace)
    u32 crc32c of everything before it

JSON keeps manifests inspectable (``shaledb read-manifest``) and evolvable
(readers ignore unknown fields); the envelope gives the version and checksum
that every persisted format has. The body's schema is in
docs/format/manifest.md and is validated by ``shaledb.manifest.model``.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ..errors import CorruptionError
from .coding import crc32c

MAGIC = b"SHMF"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
_HEAD = struct.Struct("<4sHHI")
_U32 = struct.Struct("<I")
MAX_BODY_BYTES = 1 << 30


def encode_manifest_body(body: dict[str, Any]) -> bytes:
    # allow_nan=False: NaN and Infinity are not JSON (a decoder refuses them, below).
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    raw = text.encode("ascii")
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(raw)) + raw
    return head + _U32.pack(crc32c(head))


def _not_json(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``, which Python's ``json`` reads though JSON has
    none: refused anywhere in a body, also in fields this version does not know (those
    are kept and written back)."""
    raise ValueError(f"{name} is not a JSON number")


def decode_manifest_body(data: bytes) -> dict[str, Any]:
    """The JSON object inside a manifest; CorruptionError on any damage."""
    n = len(data)
    if n < _HEAD.size + 4:
        raise CorruptionError(f"manifest is {n} bytes, shorter than its envelope")
    magic, version, _flags, body_len = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptionError("manifest magic mismatch (not a manifest)")
    if body_len > MAX_BODY_BYTES or _HEAD.size + body_len + 4 != n:
        raise CorruptionError(f"manifest body length {body_len} does not match object size {n}")
    (crc,) = _U32.unpack_from(data, n - 4)
    if crc32c(data[: n - 4]) != crc:
        raise CorruptionError("manifest checksum mismatch")
    if version not in SUPPORTED_VERSIONS:
        raise CorruptionError(f"unsupported manifest format version {version}")
    try:
        body = json.loads(data[_HEAD.size : n - 4].decode("ascii"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CorruptionError(f"manifest body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise CorruptionError("manifest body is not a JSON object")
    return body
