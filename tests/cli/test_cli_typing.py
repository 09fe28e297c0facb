"""Item 6 of issue 28: the CLI as people type it."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shaledb import Db, InvalidArgument, Settings, __version__
from shaledb.cli.app import build_parser, main
from shaledb.cli.output import Output, parse_bytes, render_bytes

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BASE, *args], capture_output=True, text=True, timeout=120, check=False)


def ok(*args: str) -> str:
    p = run(*args)
    assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with Db.open(str(path), settings=QUIET) as d:
        for i in range(5):
            d.put(b"k%d" % i, b"v%d" % i)
    return path


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    raise AssertionError("no subcommands")


def test_every_command_accepts_the_global_options_after_it() -> None:
    parser = build_parser()
    commands = _commands(parser)
    assert len(commands) >= 20
    for name, sub in commands.items():
        argv = [name]
        for a in sub._actions:
            if not a.option_strings and a.dest != "help":
                argv.append("x")  # positionals
            elif a.required:
                argv += [a.option_strings[-1], "00000000-0000-4000-8000-000000000000"]
        ns = parser.parse_args([*argv, "--json", "--path", "DB", "--debug", "--no-progress"])
        assert (ns.json, ns.path, ns.debug, ns.no_progress) == (True, "DB", True, True), name
        ns = parser.parse_args(["--json", "--path", "DB", *argv])  # before the command: kept
        assert (ns.json, ns.path) == (True, "DB"), name
        ns = parser.parse_args(argv)
        assert (ns.json, ns.path) == (False, None), name


def test_global_options_after_the_command_end_to_end(db: Path) -> None:
    assert json.loads(ok("list-checkpoints", "--json", "--path", str(db))) == []
    rows = json.loads(ok("scan", "--path", str(db), "--json", "--limit", "2"))
    assert [r["key"] for r in rows] == ["k0", "k1"]
    assert ok("--version").strip() == f"shaledb {__version__}"


def test_delete_and_the_literal_text_escape(db: Path) -> None:
    assert json.loads(ok("delete", "k1", "--path", str(db), "--json"))["deleted"] is True
    assert run("get", "k1", "--path", str(db)).returncode == 3
    p = run("put", "0xford", "oxford", "--path", str(db))
    assert p.returncode == 2 and "text:0xford" in p.stderr
    ok("put", "text:0xford", "oxford", "--path", str(db))
    ok("put", "text:text:a", "text:0x00", "--path", str(db))
    assert ok("get", "text:0xford", "--path", str(db)) == "oxford\n"
    assert ok("get", "text:text:a", "--path", str(db)) == "text:0x00\n"  # shown so it parses back
    with Db.open(db, settings=QUIET) as d:
        assert d[b"0xford"] == b"oxford" and d[b"text:a"] == b"0x00"
    for raw in (b"0xford", b"text:x", b"plain", b"\x00\xff", b"0x", b"\xde\xad", "caf\u00e9".encode()):
        assert parse_bytes(render_bytes(raw)) == raw
    # Binary that happens to be UTF-8 starting with a combining mark (U+07AD) shows as hex.
    assert render_bytes(b"\xde\xad") == "0xdead" and render_bytes("caf\u00e9".encode()) == "caf\u00e9"


def test_checkpoints_by_name_everywhere(db: Path, tmp_path: Path) -> None:
    cp = json.loads(ok("create-checkpoint", "-n", "nightly", "--path", str(db), "--json"))
    with Db.open(db, settings=QUIET) as d:
        d[b"k0"] = b"changed"
    assert ok("get", "k0", "--checkpoint", "nightly", "--path", str(db)) == "v0\n"
    rows = json.loads(ok("scan", "--checkpoint", "nightly", "--json", "--path", str(db)))
    assert rows[0]["value"] == "v0"
    again = json.loads(ok("refresh-checkpoint", "-i", "nightly", "-l", "1h", "--json", "--path", str(db)))
    assert again["id"] == cp["id"]
    src = json.loads(ok("create-checkpoint", "-s", "nightly", "-n", "copy", "--json", "--path", str(db)))
    assert src["manifest_id"] == cp["manifest_id"]
    ok("clone", "--parent", str(db), "--checkpoint", "nightly", "--path", str(tmp_path / "clone"))
    assert ok("get", "k0", "--path", str(tmp_path / "clone")) == "v0\n"
    ok("create-checkpoint", "-n", "copy", "--path", str(db))
    p = run("get", "k0", "--checkpoint", "copy", "--path", str(db))
    assert p.returncode == 2 and "2 live checkpoints are named 'copy'" in p.stderr
    p = run("get", "k0", "--checkpoint", "nope", "--path", str(db))
    assert p.returncode == 3 and "no live checkpoint named 'nope'" in p.stderr
    assert json.loads(ok("delete-checkpoint", "-i", "nightly", "--json", "--path", str(db))) == {
        "deleted": cp["id"]
    }


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_bytes_with_a_rate_and_eta() -> None:
    term = _Terminal()
    ticks = iter([0.0, 1.0, 2.0])
    with Output(False, progress_stream=term).progress("verify", unit="bytes") as p:
        p.clock = lambda: next(ticks)
        p(0, 30 << 20)
        p(10 << 20, 30 << 20)
        p(30 << 20, 30 << 20)
    drawn = term.getvalue()
    assert "10.0 MiB/30.0 MiB 33% 10.0 MiB/s ETA 2s" in drawn, drawn
    assert "30.0 MiB/30.0 MiB 100%" in drawn


def test_bench_refuses_a_database_with_data_and_never_fences_without_force(db: Path, tmp_path: Path) -> None:
    new = tmp_path / "new"
    res = json.loads(ok("bench", "--keys", "300", "--path", str(new), "--json"))
    assert res["keys"] == 300
    with Db.open(db, settings=QUIET) as writer:
        p = run("bench", "--keys", "300", "--path", str(db))
        assert p.returncode == 2 and "--force" in p.stderr, p.stderr
        writer[b"still"] = b"the writer"  # not fenced
        p = run("bench", "--keys", "300", "--path", str(db), "--force")
        assert p.returncode == 2 and "--scratch-prefix" in p.stderr, p.stderr
    ok("bench", "--keys", "300", "--path", str(db), "--force", "--scratch-prefix", "tmp-bench/")
    with Db.open(db, settings=QUIET) as d:
        assert sorted(d) == [b"k0", b"k1", b"k2", b"k3", b"k4", b"still"]  # scratch keys deleted


def test_a_double_dash_option_value_is_a_usage_error(tmp_path: Path) -> None:
    """argparse turns ``--checkpoint=--`` into an empty list (found by the CLI fuzz test)."""
    url = (tmp_path / "db").as_uri()
    with pytest.raises(SystemExit) as exc:
        main(["--path", url, "clone", "--parent", url + "-parent", "--checkpoint=--"])
    assert exc.value.code == 2


def test_bench_prints_request_counts_for_people_and_reads_the_settings_file(tmp_path: Path) -> None:
    """`bench` printed its request counts as a Python dict (every kind, zeros too), and opened
    the database with default settings whatever --settings or SHALEDB_* said."""
    text = ok("bench", "--keys", "300", "--path", str(tmp_path / "a"))
    line = next(s for s in text.splitlines() if s.startswith("store_requests"))
    assert "{" not in line and "put_create=" in line and "=0" not in line, line
    bad = tmp_path / "bad.toml"
    bad.write_text('compression = "gzipx"\n')
    p = run("--settings", str(bad), "bench", "--keys", "300", "--path", str(tmp_path / "b"))
    assert p.returncode == 2 and "compression" in p.stderr and "bad.toml" in p.stderr, p.stderr
    assert not (tmp_path / "b").exists()


def test_a_key_that_is_not_utf8_is_a_usage_error(db: Path) -> None:
    """`shaledb get $'\\xff'`: argv's non-UTF-8 bytes arrive as lone surrogates and raised a
    UnicodeEncodeError traceback (exit 1); now InvalidArgument naming the hex form (exit 2)."""
    with pytest.raises(InvalidArgument, match="0xff"):
        parse_bytes("\udcff")
    with pytest.raises(InvalidArgument, match="not UTF-8"):
        parse_bytes("text:\ud800")
    p = subprocess.run(
        [*BASE, "--path", str(db), "get", b"\xff".decode("utf-8", "surrogateescape")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "0xff" in p.stderr
