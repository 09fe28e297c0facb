"""open_store: URL forms, options and environment, validation, secrets, cas selection."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from shaledb.errors import InvalidArgument, InvalidPathError, ShaleError, Unavailable
from shaledb.store import NoConditionalStore, TwoPhaseStore, drop_memory_store, open_store

SECRET = "SENTINEL-secret-7f3a9c"


def test_memory_is_shared_by_name() -> None:
    name = f"shared-{uuid.uuid4().hex}"
    try:
        a = open_store(f"memory://{name}")
        b = open_store(f"memory://{name}")
        a.put("k", b"v")
        assert b.get("k") == b"v"
        sub = open_store(f"memory://{name}/db1")
        sub.put("x", b"1")
        assert a.get("db1/x") == b"1"
        assert [m.path for m in sub.list("")] == ["x"]
        assert sub.describe() == f"memory://{name}/db1"
        assert open_store(f"memory://other-{name}").supports_conditional_put
        with pytest.raises(ShaleError):
            open_store(f"memory://other-{name}").get("k")
    finally:
        drop_memory_store(name)
        drop_memory_store(f"other-{name}")


@pytest.mark.parametrize("url", ["memory://", "memory://a b", "memory://x?endpoint=y", "memory://a%2fb"])
def test_bad_memory_urls(url: str) -> None:
    with pytest.raises(InvalidArgument):
        open_store(url)


def test_local_path_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = open_store(str(tmp_path / "a"))
    assert not (tmp_path / "a").exists()  # created by the first write, not by opening
    assert plain.describe() == f"file://{os.path.realpath(tmp_path / 'a')}"
    plain.put("x/y", b"1")
    assert (tmp_path / "a").is_dir()
    via_url = open_store(f"file://{tmp_path / 'a'}")
    assert via_url.get("x/y") == b"1"
    assert open_store(f"file://localhost{tmp_path / 'a'}").get("x/y") == b"1"
    monkeypatch.chdir(tmp_path)
    assert open_store("a").get("x/y") == b"1"
    assert open_store("./a/").get("x/y") == b"1"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert open_store("~/a").get("x/y") == b"1"


def test_local_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InvalidArgument, match="not a directory"):
        open_store(str(tmp_path / "file"))
    with pytest.raises(InvalidPathError, match="host"):
        open_store("file://example.com/x")
    with pytest.raises(InvalidArgument):
        open_store(str(tmp_path / "db"), endpoint="x")


def test_local_root_symlink_resolves_to_real_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    st = open_store(str(tmp_path / "link"))
    assert st.describe() == f"file://{os.path.realpath(real)}"
    st.put("k", b"v")
    assert (real / "k").read_bytes() == b"v"


def test_local_symlink_inside_root_cannot_escape(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"do not read")
    root = tmp_path / "db"
    root.mkdir()  # an existing database directory (opening does not create one)
    st = open_store(str(root))
    (root / "evil").symlink_to(outside)
    with pytest.raises(InvalidPathError, match="symlink"):
        st.get("evil/secret")
    with pytest.raises(InvalidPathError):
        st.put("evil/planted", b"x")
    assert not (outside / "planted").exists()
    with pytest.raises(InvalidPathError):
        st.delete_many(["evil/secret"])
    st.put("mine", b"1")
    (root / "alias").symlink_to(outside / "secret")
    assert [m.path for m in st.list("")] == ["mine"]  # neither the directory link nor the file link
    assert (outside / "secret").read_bytes() == b"do not read"


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/../x",
        "s3://bucket/a/../../x",
        "s3://bucket/%2e%2e/x",
        "s3://bucket/a/%2E%2E",
        "s3://bucket/a//b",
        "s3://bucket/a\\b",
        "s3://bucket/a\x00b",
        "memory://m/../x",
        "gs://bucket/./x",
    ],
)
def test_urls_that_escape_are_refused(url: str) -> None:
    options = {} if url.startswith("memory") else {"endpoint": "http://127.0.0.1:9"}
    with pytest.raises(InvalidPathError) as info:
        open_store(url, **options)
    assert "\x00" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("", "non-empty"),
        ("ftp://host/x", "unsupported URL scheme"),
        ("s3:///prefix", "needs a bucket"),
        ("s3://bucket/p?bogus=1", "unknown URL option"),
        ("s3://bucket/p?secret_access_key=zzz", "credentials must not be part of a URL"),
        ("s3://bucket/p?cas=bogus", "cas must be"),
        ("s3://bucket/p?allow_http=maybe", "boolean"),
    ],
)
def test_bad_urls_say_what_to_do(url: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match) as info:
        open_store(url)
    assert "zzz" not in str(info.value)


def test_s3_with_options(s3_url_factory: Callable[[], Any]) -> None:
    loc = s3_url_factory()
    st = loc.open()
    st.put("k", b"v", create=True)
    assert st.get("k") == b"v"
    assert st.supports_attributes
    assert st.describe() == loc.url
    assert "testing" not in repr(st)


def test_s3_from_environment(s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    loc = s3_url_factory()
    for key, value in loc.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    st = open_store(loc.url)
    st.put("from-env", b"1")
    assert loc.open().get("from-env") == b"1"


def test_s3_endpoint_in_url_query(s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    loc = s3_url_factory()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    st = open_store(f"{loc.url}?endpoint={loc.endpoint}&allow_http=true&region=us-east-1")
    st.put("q", b"2")
    assert loc.open().get("q") == b"2"


def test_credentials_never_leak(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    st = open_store(
        "s3://bucket/db",
        endpoint="http://127.0.0.1:9",  # nothing listens on the discard port
        allow_http=True,
        access_key_id="AKIA" + SECRET,
        secret_access_key=SECRET,
        session_token="tok-" + SECRET,
        retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=2)},
    )
    texts = [st.describe(), repr(st), str(st)]
    with pytest.raises(Unavailable) as info:
        st.get("k")
    exc: BaseException | None = info.value
    while exc is not None:
        texts.append(str(exc))
        texts.append(repr(exc))
        exc = exc.__cause__ or exc.__context__
    texts.append(caplog.text)
    assert all(SECRET not in t for t in texts), [t for t in texts if SECRET in t]


@pytest.mark.parametrize(
    ("url", "options", "environ"),
    [
        ("s3://b/db", {"endpoint": "http://127.0.0.1:9"}, {}),
        ("s3://b/db?endpoint=http://127.0.0.1:9", {}, {}),
        ("s3://b/db", {"endpoint": "http://127.0.0.1:9", "allow_http": "false"}, {"AWS_ALLOW_HTTP": "true"}),
        ("s3://b/db", {}, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}),
        ("s3://b/db", {}, {"AWS_ENDPOINT_URL": "HTTP://127.0.0.1:9", "AWS_ALLOW_HTTP": "false"}),
        ("az://c/db", {"account_name": "acct", "endpoint": "http://127.0.0.1:9/acct"}, {}),
    ],
)
def test_plain_http_endpoint_needs_allow_http(
    url: str, options: dict[str, Any], environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http:// endpoint without allow_http is refused at open with the fix named
    (before: the first request failed as Unavailable "builder error")."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP", "AZURE_ALLOW_HTTP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InvalidArgument, match="plain HTTP") as info:
        open_store(url, access_key_id="AKIA" + SECRET, secret_access_key=SECRET, **options)
    assert "127.0.0.1:9" in str(info.value) and "allow_http=True" in str(info.value)
    assert ("AWS_ALLOW_HTTP" if url.startswith("s3") else "AZURE_ALLOW_HTTP") in str(info.value)
    assert SECRET not in repr(info.value) and info.value.__cause__ is None


@pytest.mark.parametrize(
    ("options", "environ"),
    [
        ({"endpoint": "http://127.0.0.1:9", "allow_http": True}, {}),
        ({"endpoint": "http://127.0.0.1:9"}, {"AWS_ALLOW_HTTP": "1"}),
        ({"endpoint": "http://127.0.0.1:9", "client_options": {"allow_http": "true"}}, {}),
        ({}, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ALLOW_HTTP": "true"}),
        ({"endpoint": "https://127.0.0.1:9"}, {}),
    ],
)
def test_plain_http_endpoint_with_allow_http_opens(
    options: dict[str, Any], environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    open_store("s3://b/db", access_key_id="x", secret_access_key="y", **options)


def test_bad_cloud_option_does_not_echo_secrets() -> None:
    with pytest.raises(InvalidArgument) as info:
        open_store("s3://bucket/db", secret_access_key=SECRET, no_such_option=SECRET)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None


def test_cas_selection(tmp_path: Path) -> None:
    cas = f"sqlite://{tmp_path / 'cas.db'}"
    two = open_store(str(tmp_path / "a"), cas=cas)
    assert isinstance(two, TwoPhaseStore)
    assert "two-phase" in two.describe()
    two.close()
    by_query = open_store(f"file://{tmp_path / 'b'}?cas={cas}")
    assert isinstance(by_query, TwoPhaseStore)
    by_query.close()
    name = f"cas-{uuid.uuid4().hex}"
    try:
        mem = open_store(f"memory://{name}?cas={cas}")
        assert isinstance(mem, TwoPhaseStore)
        mem.close()
        none = open_store(f"memory://{name}", cas="none")
        assert isinstance(none, NoConditionalStore)
        assert not none.supports_conditional_put
        assert open_store(f"memory://{name}", cas="native").supports_conditional_put
    finally:
        drop_memory_store(name)
    with pytest.raises(InvalidArgument, match="once"):
        open_store(f"file://{tmp_path / 'c'}?cas={cas}", cas="none")
    with pytest.raises(InvalidArgument, match="file path"):
        open_store(str(tmp_path / "d"), cas="sqlite://")


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9", "localhost:9000", "http://", "ftp://127.0.0.1:9"])
def test_endpoint_without_scheme_is_refused_at_open(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheme-less endpoint made the backend panic on every request (a Rust backtrace per
    retry) and the open end seconds later as "unreachable"; it is the caller's mistake."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    with pytest.raises(InvalidArgument, match="not a URL"):
        open_store("s3://bucket/db", access_key_id="x", secret_access_key="xxxx")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    with pytest.raises(InvalidArgument, match="not a URL"):
        open_store("s3://bucket/db", endpoint=endpoint, access_key_id="x", secret_access_key="xxxx")


@pytest.mark.parametrize(
    "url",
    [
        f"s3://AKIAKEYID:{SECRET}/tail@bucket/db",  # a '/' in the secret ends the authority early
        f"s3://AKIAKEYID:{SECRET}?tail@bucket/db",
        f"s3://AKIAKEYID:{SECRET}#tail@bucket/db",
        f"gs://AKIAKEYID:{SECRET}/tail@bucket/db",
        f"memory://AKIAKEYID:{SECRET}/tail@name/db",
        f"file://AKIAKEYID:{SECRET}/tail@localhost/tmp/db",
    ],
)
def test_credentials_cut_short_by_a_slash_are_refused_unrepeated(url: str) -> None:
    """The secret's first part was echoed as an invalid bucket name (or an unknown URL
    option) because urlsplit ends the host at the secret's '/', '?' or '#'."""
    with pytest.raises(InvalidArgument, match="must not carry credentials") as info:
        open_store(url)
    assert SECRET not in str(info.value) and "AKIAKEYID" not in str(info.value)
    # A Spark user is told the data source's spelling, not only the Python API's store_options.
    assert "with Spark, options store.access_key_id and store.secret_access_key" in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoint": "http://[::1", "allow_http": True}, "is not a URL"),
        ({"endpoint": "https://[::1"}, "is not a URL"),
        ({"client_options": "timeout=5s"}, "client_options must be a dict"),
        ({"client_options": [("timeout", "5s")]}, "client_options must be a dict"),
    ],
)
def test_malformed_endpoint_and_client_options_are_invalid_argument(
    options: dict[str, Any], message: str
) -> None:
    """Before: a bare ValueError from urlsplit ("Invalid IPv6 URL") and from dict() of a
    string, neither a ShaleError."""
    with pytest.raises(InvalidArgument, match=message):
        open_store("s3://bucket/db", **options)


def test_an_endpoint_with_user_info_is_not_repeated_in_errors(caplog: pytest.LogCaptureFixture) -> None:
    """EndpointUnreachable named the endpoint as given: http://user:SECRET@host:port."""
    caplog.set_level(logging.DEBUG)
    st = open_store("s3://bucket/db", endpoint=f"http://user:{SECRET}@127.0.0.1:9", allow_http=True)
    with pytest.raises(ShaleError) as info:
        st.get("k")
    texts = [str(info.value), caplog.text]
    assert all(SECRET not in t for t in texts), texts


@pytest.mark.parametrize(
    ("url", "option"),
    [
        ("s3://bucket/db?region=a&region=b", "region"),
        ("s3://bucket/db?region=a&REGION=b", "region"),
        ("s3://bucket/db?endpoint=https://a&allow_http=true&endpoint=https://b", "endpoint"),
        ("memory://m?cas=none&cas=none", "cas"),
        ("file:///tmp/db?cas=none&cas=none", "cas"),
    ],
)
def test_a_repeated_url_option_is_refused(url: str, option: str) -> None:
    # The last one silently won: ?region=a&region=b opened region b.
    with pytest.raises(InvalidArgument, match=f"URL option '{option}' is given more than once"):
        open_store(url)


@pytest.mark.parametrize("query", ["?foo=1", "?cas=none", "?", "?region=x"])
def test_a_plain_local_path_with_a_query_is_refused(tmp_path: Path, query: str) -> None:
    # "/tmp/db?cas=none" opened a directory named "db?cas=none", without the option it asked for.
    from shaledb import Db

    url = f"{tmp_path / 'db'}{query}"
    with pytest.raises(InvalidPathError, match="a plain path takes no URL options"):
        open_store(url)
    with pytest.raises(InvalidPathError, match="a plain path takes no URL options"):
        Db.open(url)
    assert list(tmp_path.iterdir()) == []  # no directory was made


def test_file_urls_take_options_and_percent_escapes(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="unknown URL option 'foo'"):
        open_store(f"file://{tmp_path / 'db'}?foo=1")
    with pytest.raises(InvalidArgument, match="local directories take no URL options"):
        open_store(f"file://{tmp_path / 'db'}?region=x")
    assert isinstance(open_store(f"file://{tmp_path / 'db'}?cas=none"), NoConditionalStore)
    st = open_store(f"file://{tmp_path / 'db'}%3Ffoo=1%23x")  # a '?' and a '#' that are the name's
    st.put("k", b"v")
    assert [p.name for p in tmp_path.iterdir()] == ["db?foo=1#x"]
    st.close()


@pytest.mark.parametrize(
    "url",
    ["file:///tmp/pyfix-db#frag", "file:///tmp/pyfix-db?cas=none#x", "memory://m#x", "s3://bucket/db#x"],
)
def test_a_url_fragment_is_refused(url: str) -> None:
    # "file:///tmp/db#frag" silently opened /tmp/db.
    with pytest.raises(InvalidPathError, match="a database URL has no '#' part"):
        open_store(url)


@pytest.mark.parametrize(
    "url", ["s3//bucket/db", "S3//bucket/db", "gs//b/db", "az//c/db", "memory//m", "file//tmp/db"]
)
def test_a_url_without_its_colon_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    # "s3//bucket/db" created ./s3/bucket/db and the CLI's put reported success.
    from shaledb import Db
    from shaledb.cli import main

    monkeypatch.chdir(tmp_path)
    scheme = url.split("//", 1)[0]
    with pytest.raises(InvalidPathError, match=f"lacks the ':' of {scheme}://"):
        Db.open(url)
    assert main(["--path", url, "put", "k", "v"]) == 2
    assert list(tmp_path.iterdir()) == []  # nothing was created
    with Db.open(f"./{url}") as db:  # a local directory of that name, asked for as one
        db.put(b"k", b"v")
    assert (tmp_path / scheme).is_dir()


def test_s3_options_under_obstore_s_other_names(
    s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """boto3's spellings (``endpoint_url``, ``aws_access_key_id``, ...) are the same options:
    with the AWS_* variables set they failed with obstore's "Duplicate key aws_access_key_id
    provided", and an ``endpoint_url`` skipped the plain-HTTP check (retried for seconds, then
    "unreachable") and errors named "AWS S3" instead of the endpoint."""
    loc = s3_url_factory()
    for key, value in loc.env().items():  # the variables point at the same server
        monkeypatch.setenv(key, value)
    boto = {
        "endpoint_url": loc.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "allow_http": True,
    }
    st = open_store(loc.url, **boto)
    st.put("k", b"v")
    assert loc.open().get("k") == b"v"
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InvalidArgument, match="plain HTTP") as info:
        open_store(loc.url, endpoint_url=loc.endpoint, aws_access_key_id="x", aws_secret_access_key="y")
    assert loc.endpoint in str(info.value)
    with pytest.raises(InvalidArgument, match="'endpoint' is given twice, as 'endpoint' and 'endpoint_url'"):
        open_store(loc.url, endpoint=loc.endpoint, endpoint_url=loc.endpoint, allow_http=True)
    with pytest.raises(InvalidArgument, match="given twice") as info:
        open_store(loc.url, secret_access_key=SECRET, aws_secret_access_key=SECRET)
    assert SECRET not in str(info.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def no_cloud_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GOOGLE_* / AZURE_* variable decides for the options under test."""
    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "AZURE_")):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("no_cloud_env")
def test_azure_options_under_obstore_s_other_names() -> None:
    """``azure_storage_endpoint`` / ``azure_endpoint`` / ``azure_storage_use_emulator`` are the
    same options as ``endpoint`` / ``use_emulator``: under those names the endpoint skipped the
    scheme and plain-HTTP checks, and the emulator flag did not count, so a valid Azurite set-up
    was refused as plain HTTP."""
    with pytest.raises(InvalidArgument, match="is not a URL"):
        open_store("az://c/db", account_name="acct", azure_storage_endpoint="127.0.0.1:10000")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(InvalidArgument, match="plain HTTP") as info:
        open_store("az://c/db", account_name="acct", AZURE_ENDPOINT=endpoint)
    assert endpoint in str(info.value)
    emulated = open_store(
        "az://c/db",
        azure_storage_account_name="devstoreaccount1",
        azure_storage_use_emulator=True,
        endpoint=f"{endpoint}/devstoreaccount1",
    )
    assert emulated.describe() == "az://c/db"


@pytest.mark.usefixtures("no_cloud_env")
def test_gcs_base_url_under_its_other_name_is_the_endpoint_errors_name() -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    st = open_store("gs://bkt/db", google_base_url=endpoint, google_skip_signature=True)
    with pytest.raises(ShaleError) as info:
        st.get("some/object")  # nothing listens: the error names where it looked
    assert endpoint in str(info.value), str(info.value)


@pytest.mark.usefixtures("no_cloud_env")
@pytest.mark.parametrize(
    ("url", "first", "second"),
    [
        ("az://c/db", "endpoint", "azure_storage_endpoint"),
        ("az://c/db", "account_key", "AZURE_STORAGE_ACCOUNT_KEY"),
        ("az://c/db", "sas_key", "sas_token"),
        ("gs://bkt/db", "base_url", "google_base_url"),
        ("gs://bkt/db", "service_account_key", "google_service_account_key"),
    ],
)
def test_gcs_and_azure_option_given_twice_names_the_names_not_the_values(
    url: str, first: str, second: str
) -> None:
    with pytest.raises(InvalidArgument, match="given twice") as info:
        extra = {"account_name": "acct"} if url.startswith("az:") else {}
        open_store(url, **extra, **{first: SECRET, second: SECRET + "2"})
    text = str(info.value)
    assert first in text and second in text and SECRET not in text
