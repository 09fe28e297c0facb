"""Engine adapters: shaledb and the anchors, each behind the same small interface.

An adapter has ``open()``, ``close(flush_memtable=False)``, ``writers(durable) -> (put,
write)`` where ``write`` takes a list of (key, value) pairs and builds the engine's own
batch, ``get`` (bound after open/``begin_reads``), ``scan(start, n) -> rows``, ``count_all()``,
``version()`` and ``describe()`` (the settings in force, recorded with every result).

The anchor adapters use the settings of ``shared/bench/RESULTS.md`` ("Engine settings") so
their figures are comparable with it; ``--setting`` only changes what the user names.
Engine modules are imported in ``open()``, never at import time, so the RSS baseline taken
before ``open()`` is the interpreter plus the workload data only.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import PackageNotFoundError, version
from typing import Any

MiB = 1 << 20
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "k": 1000, "M": 1000**2}


def pkg_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def parse_value(text: str) -> Any:
    """A --setting value: none/true/false, an int (``_`` and KiB/MiB/GiB allowed), a float,
    JSON, or else the string itself (e.g. ``zstd`` or SlateDB's ``10ms``)."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for unit, mult in UNITS.items():
        if text.endswith(unit) and text[: -len(unit)].replace("_", "").isdigit():
            return int(text[: -len(unit)].replace("_", "")) * mult
    for conv in (int, float, json.loads):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``["a=1", "compactor.min_l0_ssts=8"]`` -> ``{"a": 1, "compactor.min_l0_ssts": 8}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--setting wants name=value, got {pair!r}")
        out[name.strip()] = parse_value(value)
    return out


def settings_suffix(settings: dict[str, Any]) -> str:
    """Engine-name suffix that keeps runs with different settings apart in the results."""
    if not settings:
        return ""
    return "@" + ",".join(f"{k}={v}" for k, v in sorted(settings.items()))


class Engine:
    """Defaults shared by the adapters (sync, on disk, readable)."""

    name = "?"
    module: str | None = None
    """The engine's Python module: imported before the first open so the memory check can
    count the engine's own code as part of the interpreter, separately from its data."""
    is_async = False
    has_disk = True
    supports_durable = True

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        self.dir = data_dir
        self.settings = settings
        self.store = store

    def begin_reads(self) -> None:
        """Called after the (re)open that precedes a measured read phase."""

    def version(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {}

    def after_close(self) -> dict[str, Any]:
        """Extra fields once the store is closed (e.g. object-store bytes)."""
        return {}

    def shutdown(self) -> None:
        """Release process-level helpers (e.g. a moto server)."""


# --------------------------------------------------------------------------- shaledb


def _apply(obj: Any, changes: dict[str, Any]) -> Any:
    """One ``dataclasses.replace`` per level with every change of that level at once.

    All at once because Settings validates across fields (max_unflushed_bytes must be
    >= l0_sst_size_bytes), so applying overrides one by one could fail half-way. Dotted
    names reach nested options; a nested option that is ``None`` is re-created first.
    """
    fields = {f.name: f for f in dataclasses.fields(obj)}
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        head, dot, rest = name.partition(".")
        if head not in fields:
            raise SystemExit(f"unknown setting {head!r} on {type(obj).__name__}; known: {sorted(fields)}")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    for head, sub in nested.items():
        inner = top.get(head, getattr(obj, head))
        if inner is None:
            factory = fields[head].default_factory
            if factory is dataclasses.MISSING:
                raise SystemExit(f"cannot set {head}.*: {head} is None and has no default")
            inner = factory()
        top[head] = _apply(inner, sub)
    return dataclasses.replace(obj, **top)


def build_shaledb_settings(shaledb: Any, overrides: dict[str, Any]) -> Any:
    # The benchmarks run shaledb as the process's main work, the case the opt-in mmap threshold
    # is for; recorded figures were taken with it on (--setting malloc_mmap_threshold_bytes=none
    # turns it off).
    base = shaledb.Settings().replace(malloc_mmap_threshold_bytes=128 * 1024)
    return _apply(base, overrides)


class MotoServer:
    """A moto S3 server on 127.0.0.1 for ``--store s3`` (one per benchmark process).

    It runs as a child process, so its memory is not in our ru_maxrss; its latency is a
    local HTTP round trip, far below real S3's, so s3 figures show request overhead only.
    """

    def __init__(self, bucket: str = "shaledb-bench") -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")  # this venv's first
        if not os.path.exists(exe):
            exe = shutil.which("moto_server") or exe
        if not os.path.exists(exe):
            raise SystemExit("--store s3 needs moto_server (pip install 'moto[server]')")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.endpoint = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                req = urllib.request.Request(f"{self.endpoint}/{bucket}", method="PUT")
                urllib.request.urlopen(req, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit("moto_server did not start") from None
                time.sleep(0.1)
        os.environ.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ALLOW_HTTP="true",
        )
        self.bucket = bucket

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class ShaleDB(Engine):
    """shaledb through its public API (README.md) on a local directory, memory:// or s3://."""

    module = "shaledb"

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        super().__init__(data_dir, settings, store)
        self.name = f"shaledb-{store}{settings_suffix(settings)}"
        self.has_disk = store == "file"
        self.moto: MotoServer | None = None
        self.db: Any = None
        self._settings_obj: Any = None
        if store == "file":
            self.url = os.path.abspath(os.path.join(data_dir, "shaledb"))
        elif store == "memory":
            self.url = f"memory://bench-{os.getpid()}"
        elif store == "s3":
            self.url = f"s3://shaledb-bench/run-{os.getpid()}"
        else:
            raise SystemExit(f"unknown shaledb store {store!r}")

    def settings_obj(self) -> Any:
        import shaledb

        if self._settings_obj is None:
            self._settings_obj = build_shaledb_settings(shaledb, self.settings)
        return self._settings_obj

    def open(self) -> None:
        import shaledb

        if self.store == "s3" and self.moto is None:
            self.moto = MotoServer()
        self.sdb = shaledb
        self.db = shaledb.Db.open(self.url, settings=self.settings_obj())
        self.get = self.db.get

    def close(self, flush_memtable: bool = False) -> None:
        if flush_memtable:
            self.db.flush(memtable=True)
        self.db.close()
        self.db = None

    def writers(self, durable: bool) -> tuple[Any, Any]:
        db = self.db
        batch_cls = self.sdb.WriteBatch
        put = db.put if durable else functools.partial(db.put, durable=False)

        def write(items: list[tuple[bytes, bytes]]) -> None:
            # The bulk API a user loading lists would call (RocksDB's binding has only
            # a per-key ``put``; docs/benchmarks.md notes this beside the figures).
            db.write(batch_cls().put_many(items), durable=durable)

        return put, write

    def scan(self, start: bytes, n: int) -> int:
        c = 0
        for _kv in self.db.scan(start=start, limit=n):
            c += 1
        return c

    def count_all(self) -> int:
        c = 0
        for _kv in self.db.scan():
            c += 1
        return c

    def version(self) -> str | None:
        v = pkg_version("shaledb")
        try:
            here = os.path.dirname(os.path.abspath(__file__))
            rev = subprocess.run(
                ["git", "-C", here, "describe", "--always", "--dirty"],
                check=False,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except OSError:
            rev = ""
        return f"{v} ({rev})" if rev else v

    def describe(self) -> dict[str, Any]:
        s = self.settings_obj()
        out = {"store": self.store, "url": self.url, "overrides": self.settings}
        out["settings"] = s.to_dict() if hasattr(s, "to_dict") else dataclasses.asdict(s)
        return out

    def budget_bytes(self) -> dict[str, int]:
        s = self.settings_obj()
        return {
            "max_unflushed_bytes": s.max_unflushed_bytes,
            "block_cache_bytes": s.block_cache_bytes,
        }

    def after_close(self) -> dict[str, Any]:
        """Bytes and objects in the store, listed through shaledb's own store layer.

        This is the only place that reaches past the §5 API (``shaledb.store.open_store``),
        because a memory:// or s3:// store has no directory to walk.
        """
        try:
            from shaledb.store import open_store

            st = open_store(self.url)
            metas = list(st.list(""))
            st.close()
        except Exception as exc:
            return {"store_list_error": f"{type(exc).__name__}: {exc}"}
        return {"store_bytes": sum(m.size for m in metas), "store_objects": len(metas)}

    def shutdown(self) -> None:
        if self.moto is not None:
            self.moto.stop()
            self.moto = None


# --------------------------------------------------------------------------- SlateDB


class SlateDB(Engine):
    """SlateDB's UniFFI Python binding, configured as in RESULTS.md.

    ``Settings.default()``; the local store is ``ObjectStore.resolve("file:///")`` with the
    db path given relative to "/" (SlateDB rejects a path inside a file:// URL); memory is
    ``memory:///`` reused across reopen. durable = await the WriteHandle's await_durable().
    ``--setting flush_interval=10ms`` maps to ``Settings.set("flush_interval", '"10ms"')``.
    """

    module = "slatedb"

    is_async = True

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        super().__init__(data_dir, settings, store)
        self.name = f"slatedb-{store}{settings_suffix(settings)}"
        self.has_disk = store == "file"
        self.sdb: Any = None

    def _load(self) -> None:
        if self.sdb is not None:
            return
        from slatedb import uniffi as sdb

        self.sdb = sdb
        if self.store == "memory":
            self.objstore = sdb.ObjectStore.resolve("memory:///")
            self.path = "db"
        elif self.store == "file":
            self.objstore = sdb.ObjectStore.resolve("file:///")
            self.path = os.path.abspath(os.path.join(self.dir, "slatedb")).lstrip("/")
        else:
            raise SystemExit(f"slatedb adapter supports --store file|memory, not {self.store}")

    def _settings_obj(self) -> Any:
        s = self.sdb.Settings.default()
        for name, value in self.settings.items():
            s.set(name, json.dumps(value))
        return s

    async def open(self) -> None:
        self._load()
        b = self.sdb.DbBuilder(self.path, self.objstore)
        if self.settings:
            b.with_settings(self._settings_obj())
        self.db = await b.build()
        self.get = self.db.get

    async def close(self, flush_memtable: bool = False) -> None:
        if flush_memtable:
            opts = self.sdb.FlushOptions(flush_type=self.sdb.FlushType.MEM_TABLE)
            await self.db.flush_with_options(opts)
        await self.db.shutdown()
        self.db = None

    def writers(self, durable: bool) -> tuple[Any, Any]:
        db = self.db
        batch_cls = self.sdb.WriteBatch
        if not durable:

            async def write(items: list[tuple[bytes, bytes]]) -> None:
                wb = batch_cls()
                for k, v in items:
                    wb.put(k, v)
                await db.write(wb)

            return db.put, write  # the WriteHandle is dropped: not durable

        async def put_durable(k: bytes, v: bytes) -> None:
            h = await db.put(k, v)
            await h.await_durable()

        async def write_durable(items: list[tuple[bytes, bytes]]) -> None:
            wb = batch_cls()
            for k, v in items:
                wb.put(k, v)
            h = await db.write(wb)
            await h.await_durable()

        return put_durable, write_durable

    def _range(self, start: bytes | None) -> Any:
        return self.sdb.KeyRange(
            start=start, start_inclusive=start is not None, end=None, end_inclusive=False
        )

    async def scan(self, start: bytes, n: int) -> int:
        it = await self.db.scan(self._range(start))
        return len(await it.next_batch(n))

    async def count_all(self) -> int:
        it = await self.db.scan(self._range(None))
        c = 0
        while rows := await it.next_batch(1000):
            c += len(rows)
        return c

    def version(self) -> str | None:
        return pkg_version("slatedb")

    def describe(self) -> dict[str, Any]:
        self._load()
        s = json.loads(self._settings_obj().to_json_string())
        keep = (
            "flush_interval",
            "wal_enabled",
            "l0_sst_size_bytes",
            "max_unflushed_bytes",
            "compression_codec",
            "min_filter_keys",
            "l0_max_ssts",
        )
        out = {k: s.get(k) for k in keep}
        out.update(store=self.store, overrides=self.settings)
        out["runtime_threads"] = os.environ.get("SLATEDB_UNIFFI_RUNTIME_THREADS", "default")
        return out


# --------------------------------------------------------------------------- C engines


class RocksDict(Engine):
    """RocksDB via rocksdict: Options(raw_mode=True), RocksDB defaults (no bloom filter).

    durable = WriteOptions.sync=True. ``--setting bloom_bits=10`` adds a bloom filter.
    """

    module = "rocksdict"

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        super().__init__(data_dir, settings, store)
        self.name = "rocksdict" + settings_suffix(settings)

    def open(self) -> None:
        import rocksdict as rd

        self.rd = rd
        opts = rd.Options(raw_mode=True)
        bits = self.settings.get("bloom_bits")
        if bits:
            bbo = rd.BlockBasedOptions()
            bbo.set_bloom_filter(bits, False)
            opts.set_block_based_table_factory(bbo)
        self.db = rd.Rdict(os.path.join(self.dir, "rocksdb"), opts)
        self.get = self.db.get

    def close(self, flush_memtable: bool = False) -> None:
        if flush_memtable:
            self.db.flush()
        self.db.close()

    def writers(self, durable: bool) -> tuple[Any, Any]:
        db, batch_cls = self.db, self.rd.WriteBatch
        wopts: tuple[Any, ...] = ()
        if durable:
            wo = self.rd.WriteOptions()
            wo.sync = True
            wopts = (wo,)

        def write(items: list[tuple[bytes, bytes]]) -> None:
            wb = batch_cls(raw_mode=True)
            for k, v in items:
                wb.put(k, v)
            db.write(wb, *wopts)

        put = functools.partial(db.put, write_opt=wopts[0]) if durable else db.put
        return put, write

    def scan(self, start: bytes, n: int) -> int:
        return sum(1 for _kv in itertools.islice(self.db.items(from_key=start), n))

    def count_all(self) -> int:
        return sum(1 for _kv in self.db.items())

    def version(self) -> str | None:
        return pkg_version("rocksdict")

    def describe(self) -> dict[str, Any]:
        return {"options": "Options(raw_mode=True), RocksDB defaults", "overrides": self.settings}


class Plyvel(Engine):
    """LevelDB via plyvel: create_if_missing=True, LevelDB defaults (no bloom filter).

    durable = sync=True per put or batch. LevelDB has no public memtable flush: on reopen
    it recovers its log into an L0 table. ``--setting bloom_bits=10`` adds a bloom filter.
    """

    module = "plyvel"

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        super().__init__(data_dir, settings, store)
        self.name = "plyvel" + settings_suffix(settings)

    def open(self) -> None:
        import plyvel

        bits = self.settings.get("bloom_bits") or 0
        self.db = plyvel.DB(os.path.join(self.dir, "leveldb"), create_if_missing=True, bloom_filter_bits=bits)
        self.get = self.db.get

    def close(self, flush_memtable: bool = False) -> None:
        self.db.close()

    def writers(self, durable: bool) -> tuple[Any, Any]:
        db = self.db

        def write(items: list[tuple[bytes, bytes]]) -> None:
            with db.write_batch(sync=durable) as wb:
                for k, v in items:
                    wb.put(k, v)

        put = functools.partial(db.put, sync=True) if durable else db.put
        return put, write

    def scan(self, start: bytes, n: int) -> int:
        it = self.db.iterator(start=start)
        c = sum(1 for _kv in itertools.islice(it, n))
        it.close()
        return c

    def count_all(self) -> int:
        with self.db.iterator() as it:
            return sum(1 for _kv in it)

    def version(self) -> str | None:
        return pkg_version("plyvel")

    def describe(self) -> dict[str, Any]:
        return {"options": "DB(create_if_missing=True), LevelDB defaults", "overrides": self.settings}


class LMDB(Engine):
    """LMDB: map_size 16 GiB, sync=False, metasync=False (like the LSMs' unsynced default).

    One write transaction per batch or put; durable = env.sync(True) after each commit.
    Reads use one long-lived read transaction and one cursor.
    """

    module = "lmdb"

    def __init__(self, data_dir: str, settings: dict[str, Any], store: str = "file") -> None:
        super().__init__(data_dir, settings, store)
        self.name = "lmdb" + settings_suffix(settings)
        self.rtxn: Any = None

    def open(self) -> None:
        import lmdb

        path = os.path.join(self.dir, "lmdb")
        self.env = lmdb.open(path, map_size=16 << 30, sync=False, metasync=False)
        self.rtxn = None

    def begin_reads(self) -> None:
        if self.rtxn is not None:
            self.rtxn.abort()
        self.rtxn = self.env.begin()
        self.get = self.rtxn.get
        self.cur = self.rtxn.cursor()

    def close(self, flush_memtable: bool = False) -> None:
        if self.rtxn is not None:
            self.rtxn.abort()
            self.rtxn = None
        self.env.sync(True)
        self.env.close()

    def writers(self, durable: bool) -> tuple[Any, Any]:
        env = self.env

        def put(k: bytes, v: bytes) -> None:
            with env.begin(write=True) as txn:
                txn.put(k, v)
            if durable:
                env.sync(True)

        def write(items: list[tuple[bytes, bytes]]) -> None:
            with env.begin(write=True) as txn:
                for k, v in items:
                    txn.put(k, v)
            if durable:
                env.sync(True)

        return put, write

    def scan(self, start: bytes, n: int) -> int:
        cur = self.cur
        if not cur.set_range(start):
            return 0
        return sum(1 for _kv in itertools.islice(cur.iternext(), n))

    def count_all(self) -> int:
        with self.env.begin() as txn:
            return sum(1 for _kv in txn.cursor())

    def version(self) -> str | None:
        import lmdb

        return f"{lmdb.__version__} (lmdb {'.'.join(map(str, lmdb.version()))})"

    def describe(self) -> dict[str, Any]:
        return {"options": "open(map_size=16GiB, sync=False, metasync=False)"}


class PyDict(Engine):
    """The floor: a plain dict (bound C methods); scans bisect a sorted key list."""

    has_disk = False
    supports_durable = False
    name = "pydict"

    def open(self) -> None:
        if not hasattr(self, "d"):
            self.d: dict[bytes, bytes] = {}
        self.get = self.d.get

    def close(self, flush_memtable: bool = False) -> None:
        pass

    def begin_reads(self) -> None:
        self.sorted_keys = sorted(self.d)

    def writers(self, durable: bool) -> tuple[Any, Any]:
        return self.d.__setitem__, self.d.update

    def scan(self, start: bytes, n: int) -> int:
        import bisect

        sk, d = self.sorted_keys, self.d
        i = bisect.bisect_left(sk, start)
        c = 0
        for k in sk[i : i + n]:
            _ = d[k]
            c += 1
        return c

    def count_all(self) -> int:
        return sum(1 for _kv in self.d.items())

    def version(self) -> str | None:
        return platform.python_version()


ENGINES: dict[str, type[Engine]] = {
    "shaledb": ShaleDB,
    "slatedb": SlateDB,
    "rocksdict": RocksDict,
    "plyvel": Plyvel,
    "lmdb": LMDB,
    "pydict": PyDict,
}
# the module each engine needs, to tell "not installed in this interpreter" early
ENGINE_MODULES = {
    "shaledb": "shaledb",
    "slatedb": "slatedb",
    "rocksdict": "rocksdict",
    "plyvel": "plyvel",
    "lmdb": "lmdb",
    "pydict": "json",
}
