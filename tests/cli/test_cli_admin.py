"""The installed ``shaledb`` command: output, JSON and exit codes of the admin and read commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, Settings

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)
EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]


def run(*args: str, path: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [*BASE]
    if path is not None:
        cmd += ["--path", str(path)]
    cmd += list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def ok(*args: str, path: Path | str | None = None) -> str:
    p = run(*args, path=path)
    assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p.stdout


def one_line_error(p: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert text in lines[0], lines[0]


def clone_checkpoint(parent: Path) -> str:
    """The id of the checkpoint a clone holds in ``parent``."""
    listed = json.loads(ok("--json", "list-checkpoints", path=parent))
    return next(c["id"] for c in listed if c["kind"] == "clone")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "db"
    with Db.open(str(path), settings=QUIET) as d:
        for i in range(30):
            d.put(b"k%02d" % i, b"v%d" % i)
        d.flush(memtable=True)
        d.put(b"wal-only", b"w")
    return path


def test_help_lists_the_commands() -> None:
    out = ok("--help")
    for name in (
        "create-checkpoint",
        "refresh-checkpoint",
        "delete-checkpoint",
        "list-checkpoints",
        "clone",
        "destroy",
        "get",
        "put",
        "scan",
        "read-manifest",
        "list-manifests",
    ):
        assert name in out
    p = run("get", "k")
    assert p.returncode == 2 and "--path" in p.stderr


def test_get_put_and_exit_codes(db: Path) -> None:
    assert ok("get", "k05", path=db) == "v5\n"
    assert ok("get", "wal-only", path=db) == "w\n"
    one_line_error(run("get", "missing", path=db), 3, "not found")
    data = json.loads(ok("--json", "get", "k05", path=db))
    assert data == {"key": "k05", "value": "v5", "key_hex": "6b3035", "value_hex": "7635"}
    p = run("--json", "get", "missing", path=db)
    assert p.returncode == 3 and json.loads(p.stdout)["value"] is None
    ok("put", "0x00ff", "0x0102", path=db)
    assert ok("get", "0x00ff", path=db) == "0x0102\n"
    one_line_error(run("get", "0xzz", path=db), 2, "not hex")
    one_line_error(run("get", "k", path=db.parent / "nothing"), 3, "no database")


def test_scan_forms(db: Path) -> None:
    out = ok("scan", "--prefix", "k1", path=db).splitlines()
    assert out[0].split() == ["KEY", "VALUE"] and [line.split()[0] for line in out[1:]] == [
        f"k{i:02d}" for i in range(10, 20)
    ]
    rows = json.loads(ok("--json", "scan", "--from", "k05", "--to", "k08", path=db))
    assert [r["key"] for r in rows] == ["k05", "k06", "k07"]
    rows = json.loads(ok("--json", "scan", "--limit", "2", "--reverse", path=db))
    assert [r["key"] for r in rows] == ["wal-only", "k29"]
    assert json.loads(ok("--json", "scan", "--count", path=db)) == {"count": 31}
    one_line_error(run("scan", "--prefix", "k", "--to", "z", path=db), 2, "--to")
    p = run("scan", "--prefix", "k", "--from", "a", path=db)
    assert p.returncode == 2 and "not allowed with" in p.stderr
    one_line_error(run("scan", "--limit", "-1", path=db), 2, "--limit")


def test_checkpoint_commands(db: Path) -> None:
    cp = json.loads(
        ok("--json", "create-checkpoint", "--lifetime", "7days 30min 10s", "--name", "n1", path=db)
    )
    assert cp["name"] == "n1" and cp["kind"] == "user" and cp["expires_in"] == "7d 30min 10s"
    table = ok("list-checkpoints", path=db)
    assert cp["id"] in table and table.splitlines()[0].split()[:2] == ["ID", "MANIFEST_ID"]
    listed = json.loads(ok("--json", "list-checkpoints", "--name", "n1", path=db))
    assert [c["id"] for c in listed] == [cp["id"]]
    ok("put", "k05", "changed", path=db)
    assert ok("get", "--checkpoint", cp["id"], "k05", path=db) == "v5\n"
    assert ok("get", "k05", path=db) == "changed\n"
    rows = json.loads(ok("--json", "scan", "--checkpoint", cp["id"], "--prefix", "k0", path=db))
    assert {r["key"]: r["value"] for r in rows}["k05"] == "v5"
    derived = json.loads(ok("--json", "create-checkpoint", "--source", cp["id"], path=db))
    assert derived["manifest_id"] == cp["manifest_id"] and derived["expires"] is None
    refreshed = json.loads(ok("--json", "refresh-checkpoint", "--id", cp["id"], "--lifetime", "1h", path=db))
    assert refreshed["expires_in"] in ("1h", "59min 59s")
    forever = json.loads(ok("--json", "refresh-checkpoint", "-i", cp["id"], path=db))
    assert forever["expires"] is None
    assert json.loads(ok("--json", "delete-checkpoint", "--id", cp["id"], path=db)) == {"deleted": cp["id"]}
    one_line_error(run("delete-checkpoint", "--id", cp["id"], path=db), 3, "CheckpointNotFound")
    one_line_error(run("get", "--checkpoint", cp["id"], "k05", path=db), 3, "CheckpointNotFound")
    # Not a UUID: a checkpoint name (issue 28), and none is named so.
    one_line_error(run("delete-checkpoint", "--id", "not-a-uuid", path=db), 3, "no live checkpoint named")
    one_line_error(run("create-checkpoint", "--lifetime", "3 fortnights", path=db), 2, "unknown unit")
    one_line_error(run("list-checkpoints", path=db.parent / "nothing"), 3, "no database")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create-checkpoint", "--lifetime", "-1h"], "InvalidArgument: --lifetime must be positive: got -1h"),
        (["create-checkpoint", "-l", "-1h"], "--lifetime must be positive: got -1h"),
        (["create-checkpoint", "--lifetime=-90s"], "--lifetime must be positive: got -90s"),
        (["run-compactor", "--once", "--poll-interval", "-1e-3"], "--poll-interval must be"),
        (["compact-journal", "--max-runs", "-1"], "--max-runs must be an integer, >= 0"),
    ],
)
def test_a_negative_value_reaches_the_option_s_own_check(db: Path, args: list[str], message: str) -> None:
    """argparse reads ``-1h`` (or ``-1e-3``) as an option: ``--lifetime -1h`` said "argument
    -l/--lifetime: expected one argument", about the grammar, and ``--lifetime=-1h`` "cannot
    parse duration". The value now reaches the option's check, which says what is wrong; and
    ``--max-runs -1`` compacted nothing without a word. Nothing is created."""
    before = ok("--json", "list-checkpoints", path=db)
    one_line_error(run(*args, path=db), 2, message)
    assert ok("--json", "list-checkpoints", path=db) == before


def test_a_negative_lifetime_on_refresh_is_refused_and_keeps_the_expiry(db: Path) -> None:
    cp = json.loads(ok("--json", "create-checkpoint", "--lifetime", "1h", "--name", "keep", path=db))
    one_line_error(
        run("refresh-checkpoint", "--id", "keep", "--lifetime", "-5min", path=db),
        2,
        "--lifetime must be positive: got -5min",
    )
    (after,) = json.loads(ok("--json", "list-checkpoints", "--name", "keep", path=db))
    assert after["id"] == cp["id"] and after["expires_in"] not in (None, "expired")


def test_a_plain_path_with_a_question_mark_is_explained_in_command_line_terms(tmp_path: Path) -> None:
    """The store's refusal said "give options as keywords (cas=...)", the Python API's way; a
    shell user passes options in a file URL. Both file URLs are spelled out from the path given,
    and the one for a '?' in a directory's name works as printed. Nothing is created."""
    given = tmp_path / "db?cas=none"
    p = run("put", "a", "1", path=given)
    one_line_error(p, 2, f"give a file URL: --path 'file://{tmp_path}/db?cas=none'")
    assert "keywords" not in p.stderr and "%3F" in p.stderr
    assert list(tmp_path.iterdir()) == []
    named = p.stderr.rsplit("--path ", 1)[1].strip().strip("'")
    ok("put", "a", "1", path=named)
    assert [d.name for d in tmp_path.iterdir()] == ["db?cas=none"]
    one_line_error(run("clone", "--parent", f"{given}", path=tmp_path / "c"), 2, "--parent '")


def test_clone_and_destroy(db: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    info = json.loads(ok("--json", "clone", "--parent", str(db), path=clone))
    assert info["parent"] == f"file://{db.resolve()}" and info["ancestors"] == [info["parent"]]
    assert ok("get", "k07", path=clone) == "v7\n"
    ok("put", "mine", "1", path=clone)
    one_line_error(run("get", "mine", path=db), 3, "not found")
    again = json.loads(ok("--json", "clone", "--parent", str(db), path=clone))  # reopens, no new pin
    assert again["parent_checkpoint"] == info["parent_checkpoint"]
    kinds = [c["kind"] for c in json.loads(ok("--json", "list-checkpoints", path=db))]
    assert kinds.count("clone") == 1
    one_line_error(run("destroy", "--hard", path=db), 1, "live checkpoint")
    held = clone_checkpoint(db)
    one_line_error(run("delete-checkpoint", "--id", held, path=db), 1, f"held by the clone at file://{clone}")
    assert ok("get", "k07", path=clone) == "v7\n"  # (refused: the clone still reads the parent)
    one_line_error(run("clone", "--parent", str(db), path=db), 2, "itself")
    assert json.loads(ok("--json", "destroy", "--hard", path=clone))["mode"] == "hard"
    assert not any(clone.rglob("*.manifest"))
    assert list(clone.iterdir()) == []  # its emptied folders went too (wal/, manifest/ ... stayed)
    one_line_error(run("delete-checkpoint", "--id", held, path=db), 3, "CheckpointNotFound")  # released
    soft = ok("destroy", path=db)  # soft: says who deletes the objects, and when
    assert "db_delete_grace_s (1d by default)" in soft and "destroy --hard" in soft, soft
    one_line_error(run("get", "k01", path=db), 3, "destroyed")
    one_line_error(run("create-checkpoint", path=db), 3, "destroyed")
    ok("destroy", "--hard", path=db)
    assert list(db.iterdir()) == []
    one_line_error(run("get", "k01", path=db), 3, "no database")


def test_a_destroyed_database_says_how_to_use_its_location_again(tmp_path: Path) -> None:
    """A user who destroyed a database to start over and ran ``put`` again was told only
    "database at ... was destroyed", for the day of the grace period: the error now names
    ``destroy --hard`` (and the grace period), after which ``put`` creates a new database."""
    path = tmp_path / "db"
    ok("put", "a", "1", path=path)
    ok("destroy", path=path)
    for args in (("put", "a", "2"), ("get", "a"), ("create-checkpoint",)):
        one_line_error(run(*args, path=path), 3, "destroyed")
        line = run(*args, path=path).stderr
        assert "destroy --hard" in line and "db_delete_grace_s" in line and "UTC" in line, line
    ok("destroy", "--hard", path=path)
    ok("put", "a", "2", path=path)
    assert ok("get", "a", path=path) == "2\n"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    p = run("--debug", "list-checkpoints", path=tmp_path / "nothing")
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_verbose_shows_the_info_logs_and_only_shaledb_s(tmp_path: Path) -> None:
    # An operator had WARNING (the default) or --debug (every store request) and nothing
    # between: the writer's open, its flushes and fencing are INFO (docs/logging.md).
    url = str(tmp_path / "db")
    quiet = run("put", "a", "1", path=url)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    loud = run("put", "b", "2", "--verbose", path=url)
    assert loud.returncode == 0, loud.stderr
    lines = loud.stderr.splitlines()
    assert any(" INFO shaledb.db: opened " in line for line in lines), lines
    assert any(" INFO shaledb.flush: flushed a memtable" in line for line in lines), lines
    assert all(" DEBUG " not in line and " shaledb." in line for line in lines), lines
    assert ok("get", "b", path=url).strip() == "2"


@pytest.mark.parametrize("args", [("delete", "k"), ("delete-range", "a", "b")])
def test_delete_of_a_missing_database_is_not_found_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Before, `delete` on a mistyped path created a new empty database there and said ok."""
    missing = tmp_path / "typo"
    one_line_error(run(*args, path=missing), 3, "NotFound")
    assert not missing.exists()


def test_delete_range_of_an_empty_range_says_nothing_was_deleted_and_fences_nobody(db: Path) -> None:
    """`delete-range a a` printed `deleted_range True` with a sequence number, though an empty
    range writes nothing (as `Db.delete_range(b"a", b"a")`), and it opened the writer, fencing a
    running one; `delete-range b a` was refused only after fencing it too."""
    with Db.open(db, settings=QUIET) as writer:
        out = json.loads(ok("--json", "delete-range", "k01", "k01", path=db))
        assert out["deleted_range"] is False and "nothing deleted" in out["note"] and "seq" not in out, out
        assert "deleted_range  False" in ok("delete-range", "k01", "k01", path=db)
        one_line_error(run("delete-range", "k02", "k01", path=db), 2, "InvalidArgument")
        writer[b"still"] = b"the writer"  # not fenced
        assert writer.get(b"k01") == b"v1"
    one_line_error(run("delete-range", "a", "a", path=db.with_name("typo")), 3, "NotFound")
    out = json.loads(ok("--json", "delete-range", "k01", "k03", path=db))
    assert out["deleted_range"] is True and out["seq"] > 0
    assert run("get", "k01", path=db).returncode == 3 and ok("get", "k03", path=db).strip() == "v3"


def _subcommands() -> dict[str, Any]:
    """The CLI's commands and their parsers, in the order `shaledb --help` lists them."""
    import argparse

    from shaledb.cli.app import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_argument_of_every_command_has_help_text() -> None:
    """`index-query --help` listed FIELD and --limit with no word on what they are."""
    import argparse

    missing = [
        f"{name} {a.dest}"
        for name, p in _subcommands().items()
        for a in p._actions
        if not a.help and not isinstance(a, argparse._HelpAction)
    ]
    assert not missing, missing


@pytest.mark.parametrize(
    "command", [("read-manifest",), ("list-manifests",), ("compact-journal",), ("get", "a")]
)
def test_a_missing_database_is_named_the_same_way_by_every_command(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """read-manifest, list-manifests and compact-journal named the path as typed (`./typo`),
    the others as the store's URL (`file:///abs/typo`)."""
    missing = tmp_path / "typo"
    p = run(*command, path=missing)
    one_line_error(p, 3, f"NotFound: no database at {missing.as_uri()}")


def test_a_memory_database_not_found_says_it_lived_in_another_process() -> None:
    """`put` then `get` on memory://x: each command is its own process, so the second finds
    nothing; the error says why instead of leaving the user to guess."""
    ok("put", "a", "b", path="memory://cli-hint")
    p = run("get", "a", path="memory://cli-hint")
    assert p.returncode == 3, (p.returncode, p.stderr)
    first, note = p.stderr.strip().splitlines()
    assert "NotFound: no database at memory://cli-hint" in first
    assert "lives only in the process that made it" in note and "Traceback" not in p.stderr


def test_docs_cli_lists_every_command_in_the_help_order() -> None:
    """docs/cli.md's table names each command once, in the order `shaledb --help` lists them."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    table = doc.split("## Commands", 1)[1].split("## Examples", 1)[0]
    documented = re.findall(r"^\| `([a-z-]+)", table, flags=re.M)
    assert documented == list(_subcommands())


@pytest.mark.parametrize(
    ("typed", "hint"),
    [
        ("gc", "did you mean 'run-gc'?"),
        ("scna", "did you mean 'scan'?"),
        ("feed", "did you mean 'changes'?"),
        ("xyz", "unknown command 'xyz' ("),
    ],
)
def test_a_mistyped_command_names_the_closest_ones(tmp_path: Path, typed: str, hint: str) -> None:
    """argparse listed all 25 commands ("invalid choice: 'gc' (choose from 'get', ...)")."""
    p = run(typed, path=tmp_path / "db")
    assert p.returncode == 2 and hint in p.stderr and "choose from" not in p.stderr, p.stderr
    assert not (tmp_path / "db").exists()


def test_run_gc_prints_a_line_per_pass_that_did_something(tmp_path: Path) -> None:
    """A pass a minute that deleted nothing printed a line each (the docs say: only passes
    that did something)."""
    import signal
    import time

    db = tmp_path / "db"
    with Db.open(db, settings=QUIET) as d:
        for i in range(3):
            d.put(b"k%d" % i, b"v")
            d.flush(memtable=True)  # older manifests: garbage for the first pass
    cmd = [*BASE, "--path", str(db), "run-gc", "--interval", "0.1", "--min-age", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        start = p.stdout.readline()  # says it runs, and how (it was silent until a pass deleted)
        assert start.startswith("garbage collector running: a pass every 100ms"), start
        assert "older than 0ms" in start, start
        first = p.stdout.readline()  # the first pass deletes the old manifests
        assert "deleted" in first, first
        time.sleep(1.5)  # a dozen idle passes at 0.1 s
    finally:  # a failed assertion left the collector running after the test
        p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out == "", out  # the old code printed a line per idle pass


def test_run_compactor_and_run_gc_take_their_options_from_the_settings(tmp_path: Path) -> None:
    """docs/cli.md: --settings (and SHALEDB_* variables) apply to the commands that open a
    compactor or collector; run-compactor and run-gc used the defaults whatever they said."""
    import os

    db = tmp_path / "db"
    with Db.open(db, settings=QUIET) as d:
        for i in range(3):
            d.put(b"k%d" % i, b"v")
            d.flush(memtable=True)  # 3 L0 SSTs (the default min_l0_ssts is 4); old manifests
    toml = tmp_path / "shaledb.toml"
    toml.write_text('compactor = "none"\n\n[garbage_collector]\nmin_age_s = 0\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHALEDB_")}
    gc = [*BASE, "--path", str(db), "--json", "--settings", str(toml), "run-gc", "--dry-run"]
    p = subprocess.run(gc, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["deleted"]["manifest"], p.stdout  # min_age_s 0: old manifests go
    p = subprocess.run(
        [*gc[:-1], "--min-age", "3600", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert not json.loads(p.stdout)["deleted"]["manifest"], p.stdout  # the option beats the file
    compact = [*BASE, "--path", str(db), "--json", "run-compactor", "--once"]
    p = subprocess.run(compact, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert p.returncode == 0 and json.loads(p.stdout)["committed"] == 0, (p.stdout, p.stderr)
    env["SHALEDB_COMPACTOR__MIN_L0_SSTS"] = "2"
    p = subprocess.run(compact, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert p.returncode == 0 and json.loads(p.stdout)["committed"] == 1, (p.stdout, p.stderr)


def test_long_manifest_lists_are_cut_in_human_lines(tmp_path: Path) -> None:
    """A busy writer keeps ~100 versions active through its view checkpoints: each run-gc and
    verify line listed every id (a 600-character line per pass); --json keeps them all."""
    from shaledb.cli.output import id_list

    assert id_list([3, 5]) == "[3, 5]"
    assert id_list(list(range(10, 110))) == "[10, 11, 12, 13, 14, ... 109] (100)"
    db = tmp_path / "db"
    with Db.open(db, settings=QUIET) as d:
        d.put(b"k", b"v")
        for i in range(8):
            d.create_checkpoint(name=f"cp{i}")
            d.put(b"k%d" % i, b"v")
            d.flush(memtable=True)
    line = ok("run-gc", "--once", path=db)
    assert "active manifests [3, 5, 7, 9, 11, ... 19] (9)" in line, line
    assert "manifests [19, 3, 5, 7, 9, ... 17] (9):" in ok("verify", path=db)
    assert len(json.loads(ok("--json", "run-gc", "--once", path=db))["active_manifests"]) == 9


def test_counts_in_human_lines_agree_with_their_nouns(tmp_path: Path) -> None:
    """'1 SST', '1 WAL object', '1 fence kept': run-gc, verify and read-manifest said '1 SSTs'."""
    db = tmp_path / "db"
    with Db.open(db, settings=QUIET) as d:
        d.put(b"k", b"v")
        d.flush(memtable=True)
    line = ok("verify", path=db)
    assert ": 1 SST, 0 journal objects, " in line, line
    line = ok("run-gc", "--once", "--min-age", "0", path=db)
    assert "1 fence kept" in line and "0 checkpoints expired" in line, line
    assert "data tree: 1 L0 SST, 0 sorted runs, " in ok("read-manifest", path=db)


def test_delete_checkpoint_force_takes_a_checkpoint_of_a_clone_gone_for_good(tmp_path: Path) -> None:
    parent, clone = tmp_path / "db", tmp_path / "clone"
    Db.open(str(parent), settings=QUIET).close()
    ok("clone", "--parent", str(parent), path=clone)
    held = clone_checkpoint(parent)
    one_line_error(run("delete-checkpoint", "--id", held, path=parent), 1, "--force")
    for f in sorted(clone.rglob("*"), reverse=True):  # the clone removed by other means
        f.unlink() if f.is_file() else f.rmdir()
    deleted = json.loads(ok("--json", "delete-checkpoint", "--id", held, "--force", path=parent))
    assert deleted == {"deleted": held}
    ok("destroy", "--hard", path=parent)


def test_read_manifest_refuses_a_bad_id_and_names_a_missing_one(db: Path) -> None:
    """``read-manifest --id -1`` said "InvalidPathError: id -1 is outside 0..2**64-1" (a path's
    check, not the option's), and an id the collector deleted (or not written yet) only "object
    not found: manifest/000...0N.manifest"."""
    latest = json.loads(ok("--json", "read-manifest", path=db))["id"]
    for bad in ("-1", "0"):
        one_line_error(run("read-manifest", "--id", bad, path=db), 2, "--id must be an integer, >= 1 and <=")
    ahead = run("read-manifest", "--id", str(latest + 5), path=db)
    one_line_error(ahead, 3, f"NotFound: no manifest {latest + 5} at ")
    assert ahead.stderr.rstrip().endswith(f"the latest is {latest}"), ahead.stderr
    assert json.loads(ok("--json", "read-manifest", "--id", str(latest), path=db))["id"] == latest


def test_clone_again_reports_the_finished_clone_without_fencing_its_writer(db: Path, tmp_path: Path) -> None:
    """``clone`` run again (a script making sure the clone exists) opened the finished clone's
    writer, fencing the one running there, and took a ``--checkpoint`` naming another version
    than the clone's as done (exit 0, the old clone's figures). It now reports the clone as it
    is (``created`` false) without opening it, and refuses another version."""
    clone = tmp_path / "clone"
    ok("create-checkpoint", "--name", "first", path=db)
    made = json.loads(ok("--json", "clone", "--parent", str(db), "--checkpoint", "first", path=clone))
    assert made["created"] is True
    with Db.open(str(clone), settings=QUIET) as running:
        running.put(b"a", b"1")
        again = json.loads(ok("--json", "clone", "--parent", str(db), "--checkpoint", "first", path=clone))
        running.put(b"b", b"2")  # before: FencedError, the rerun had opened the clone's writer
        assert again["created"] is False and again["parent_checkpoint"] == made["parent_checkpoint"]
        ok("put", "k00", "changed", path=db)
        ok("create-checkpoint", "--name", "second", path=db)
        other = run("clone", "--parent", str(db), "--checkpoint", "second", path=clone)
        one_line_error(other, 2, f"{clone} is already a clone of {db} at its version ")
        running.put(b"c", b"3")
    assert ok("get", "c", path=clone) == "3\n" and ok("get", "k00", path=clone) == "v0\n"


def test_backup_to_memory_is_refused(db: Path) -> None:
    """``backup memory://x`` copied, said "manifest written as 1" and exited 0; the backup
    lived in the command's process and was gone when it exited."""
    p = run("backup", "memory://nightly", path=db)
    one_line_error(p, 2, "backup DEST memory://nightly is a memory:// store, which lives only in")
    assert not [c for c in json.loads(ok("--json", "list-checkpoints", path=db)) if c["name"] == "backup"]
