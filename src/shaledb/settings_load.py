"""Settings from the environment and from TOML files, and back to TOML.

A service configures shaledb as it configures its other parts: environment
variables (``SHALEDB_FLUSH_INTERVAL_S=0.05``, nested options with a double
underscore: ``SHALEDB_COMPACTOR__MAX_SOURCES=8``) or a TOML file (top-level
keys, one table per nested option: ``[compactor]``). Both go through the same
dataclasses, so validation is the dataclasses' own; this module only turns
text into typed values and names the source of a bad one. An unknown name is
refused with the closest known names (a typo must not silently keep a
default).

TOML has no null: ``"none"`` (any case) stands for None wherever a setting
may be None (``compactor = "none"`` turns the embedded compactor off).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import InvalidArgument, named_as_typed
from .merge import MergeOperator
from .numbers import float_from_text, int_from_text
from .option_names import Seconds

T = TypeVar("T")

NONE_TEXT = "none"

TOOL_VARIABLES: frozenset[str] = frozenset(
    {
        "SETTINGS_FILE",
        "AMBIGUOUS_OPS",
        "FUZZ_EXAMPLES",
        "FUZZ_SEED",
        "JOURNAL_EXAMPLES",
        "JOURNAL_SEED",
        "JOURNAL_STEPS",
        "KILL_ROUNDS",
        "PYTHON",
        "RACE_ROUNDS",
        "RACE_WRITERS",
        "REGEN_GOLDEN",
        "SEED",
        "STATEFUL_EXAMPLES",
        "STATEFUL_STEPS",
        "TEST_SEED",
    }
)
"""Variables under the default prefix that are not settings (test and tool knobs,
and ``SHALEDB_SETTINGS_FILE``); ``from_env`` skips them instead of refusing them."""

SETTINGS_FILE_VARIABLE = "SHALEDB_SETTINGS_FILE"
"""Names a TOML file that :func:`load_settings` reads before the environment."""


def _did_you_mean(name: str, known: list[str], render: typing.Callable[[str], str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(render(c) for c in close) + "?"
    return "; known: " + ", ".join(render(k) for k in known)


def _hints(cls: type) -> dict[str, Any]:
    """Field types, a duration field (``Seconds[float]``) as the type it reads back as."""
    hints = typing.get_type_hints(cls)
    return {k: typing.get_args(v)[0] if typing.get_origin(v) is Seconds else v for k, v in hints.items()}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _is_options(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _from_text(text: str, tp: Any, where: str) -> Any:
    """An environment variable's text as a value of type ``tp``."""
    base, optional = _unwrap_optional(tp)
    if optional and text.strip().lower() == NONE_TEXT:
        return None
    t = text.strip()
    if base is bool:
        low = t.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InvalidArgument(f"{where} must be true or false, got {text!r}")
    if base is int:  # plain ASCII decimal only: int() took 0x10, 1_000 and other scripts' digits
        return int_from_text(where, t)
    if base is float:
        return float_from_text(where, t)
    return text  # str and Literal[...] (the dataclass checks the choices)


def _from_toml(value: Any, tp: Any, where: str) -> Any:
    """A TOML value as a value of type ``tp`` (TOML is typed already: only None needs care)."""
    base, optional = _unwrap_optional(tp)
    if optional and isinstance(value, str) and value.lower() == NONE_TEXT:
        return None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        raise InvalidArgument(f"{where} is a single value, not a table")
    return value


def build(
    cls: type[T], data: Mapping[str, Any], render: typing.Callable[[tuple[str, ...]], str], source: str = ""
) -> T:
    """``cls`` from nested plain data whose leaves are already typed.

    ``render`` names a key path as its source spells it (an environment
    variable, a TOML key), for unknown-name and nesting errors; values are
    validated by the dataclasses themselves, and their errors say ``source``.
    """
    try:
        return _build(cls, data, (), render)
    except InvalidArgument as exc:
        if not source:
            raise
        raise InvalidArgument(f"{exc} (in {source})") from None


def _build(
    cls: type[T],
    data: Mapping[str, Any],
    path: tuple[str, ...],
    render: typing.Callable[[tuple[str, ...]], str],
) -> T:
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in hints or key not in names:
            known = sorted(names)
            raise InvalidArgument(
                f"unknown setting {render((*path, key))}"
                + _did_you_mean(key, known, lambda n: render((*path, n)))
            )
        base, optional = _unwrap_optional(hints[key])
        if _is_options(base):
            if isinstance(value, base):
                kwargs[key] = value
            elif value is None:
                if not optional:
                    raise InvalidArgument(f"{render((*path, key))} cannot be none")
                kwargs[key] = None
            elif isinstance(value, Mapping):
                kwargs[key] = _build(base, value, (*path, key), render)
            else:
                raise InvalidArgument(
                    f"{render((*path, key))} is a group of options; set its fields "
                    f"(e.g. {render((*path, key, dataclasses.fields(base)[0].name))})"
                    + (f" or {NONE_TEXT!r} to turn it off" if optional else "")
                )
        elif isinstance(value, Mapping):
            raise InvalidArgument(f"{render((*path, key))} is a single value, not a group of options")
        else:
            kwargs[key] = value
    # The class's check names its field (GcOptions.interval_s); the user wrote a
    # variable or a key (SHALEDB_GARBAGE_COLLECTOR__INTERVAL_S, garbage_collector.interval_s).
    with named_as_typed({key: (render((*path, key)), None) for key in kwargs}):
        return cls(**kwargs)


def _leaf_types(
    cls: type, path: tuple[str, ...] = (), durations: set[tuple[str, ...]] | None = None
) -> dict[tuple[str, ...], Any]:
    """Every key path's type; ``durations`` collects the paths of duration fields
    (``Seconds[...]``), which also take duration strings."""
    out: dict[tuple[str, ...], Any] = {}
    for name, raw in typing.get_type_hints(cls).items():
        tp = typing.get_args(raw)[0] if typing.get_origin(raw) is Seconds else raw
        if durations is not None and tp is not raw:
            durations.add((*path, name))
        base, _optional = _unwrap_optional(tp)
        out[(*path, name)] = tp
        if _is_options(base):
            out.update(_leaf_types(base, (*path, name), durations))
    return out


# ------------------------------------------------------------- environment


def env_data(
    cls: type, prefix: str, env: Mapping[str, str], skip: frozenset[str] = TOOL_VARIABLES
) -> dict[str, Any]:
    """The nested, typed data of the variables in ``env`` under ``prefix`` (names case-insensitive)."""
    durations: set[tuple[str, ...]] = set()
    types_by_path = _leaf_types(cls, durations=durations)
    up = prefix.upper()

    def render(p: tuple[str, ...]) -> str:
        return prefix + "__".join(p).upper()

    data: dict[str, Any] = {}
    for var in sorted(env):
        if not var.upper().startswith(up):
            continue
        rest = var[len(prefix) :]
        if rest.upper() in skip:
            continue
        path = tuple(part.lower() for part in rest.split("__"))
        if not all(path):
            raise InvalidArgument(f"{var}: empty name part (nested options are NAME__FIELD)")
        tp = types_by_path.get(path)
        if tp is None:
            _build_unknown(cls, path, render)
        text = env[var]
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if child is None:
                raise InvalidArgument(f"{var} sets a field of {render(path[:-1])}, which is set to none")
            node = child
        base, optional = _unwrap_optional(tp)
        if _is_options(base):
            if optional and text.strip().lower() == NONE_TEXT:
                if node.get(path[-1]):
                    raise InvalidArgument(f"{var}={text!r} turns off options that other variables set")
                node[path[-1]] = None
                continue
            raise InvalidArgument(
                f"{var} is a group of options: set its fields ({render(path)}__FIELD)"
                + (f" or set it to {NONE_TEXT!r} to turn it off" if optional else "")
            )
        if path in durations and text.strip().lower() != NONE_TEXT:
            try:
                node[path[-1]] = _from_text(text, tp, var)
            except InvalidArgument:  # "5m", "1h30m": the dataclass parses (and checks) it
                node[path[-1]] = text.strip()
            continue
        node[path[-1]] = _from_text(text, tp, var)
    return data


def _build_unknown(cls: type, path: tuple[str, ...], render: typing.Callable[[tuple[str, ...]], str]) -> None:
    """Raise the unknown-name error for ``path`` (found by building the smallest data naming it)."""
    data: dict[str, Any] = {}
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = None
    build(cls, data, render)
    raise InvalidArgument(f"unknown setting {render(path)}")  # pragma: no cover - build raised


def from_env(cls: type[T], prefix: str = "SHALEDB_", env: Mapping[str, str] | None = None) -> T:
    """``cls`` from environment variables under ``prefix`` (defaults for the rest)."""
    source = os.environ if env is None else env
    return build(
        cls,
        env_data(cls, prefix, source),
        lambda p: prefix + "__".join(p).upper(),
        f"the {prefix}* environment",
    )


# ------------------------------------------------------------------- TOML


def toml_data(cls: type, doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A parsed TOML document as typed nested data for ``cls``."""

    def convert(c: type, node: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
        hints = _hints(c)
        out: dict[str, Any] = {}
        for key, value in node.items():
            tp = hints.get(key)
            if tp is None:
                out[key] = value  # build() refuses it with did-you-mean
                continue
            base, optional = _unwrap_optional(tp)
            where = f"{'.'.join((*path, key))} (in {source})"
            if _is_options(base) and isinstance(value, Mapping):
                out[key] = convert(base, value, (*path, key))
            elif _is_options(base) and optional and isinstance(value, str) and value.lower() == NONE_TEXT:
                out[key] = None
            else:
                out[key] = _from_toml(value, tp, where)
        return out

    return convert(cls, doc, ())


def from_toml(cls: type[T], text: str, source: str = "<toml>") -> T:
    """``cls`` from TOML text (``source`` names it in errors)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{source} is not valid TOML: {exc}") from None
    return build(cls, toml_data(cls, doc, source), ".".join, source)


def from_file(cls: type[T], path: str | os.PathLike[str]) -> T:
    """``cls`` from a TOML file."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"settings file must be a path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    if "\x00" in str(p):
        raise InvalidArgument("settings file path contains a NUL character")
    try:
        text = _read_text(p)
    except FileNotFoundError:
        raise InvalidArgument(f"settings file {str(p)!r} does not exist") from None
    return from_toml(cls, text, str(p))


def _read_text(p: Path) -> str:
    """A settings file's text; InvalidArgument if it cannot be read or is not UTF-8 (TOML
    is UTF-8: a binary or Latin-1 file raised a bare UnicodeDecodeError)."""
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InvalidArgument(f"cannot read settings file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"settings file {str(p)!r} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8"
        ) from None


def _toml_value(v: Any) -> str:
    if v is None:
        return f'"{NONE_TEXT}"'
    if isinstance(v, MergeOperator):  # by name: the ready ones read back (shaledb.merge)
        v = v.name
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        escaped = v.replace("\\", "\\\\").replace('"', '\\"')
        escaped = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in escaped)
        return f'"{escaped}"'
    raise InvalidArgument(f"cannot write {type(v).__name__} {v!r} as TOML")


def to_toml(obj: Any) -> str:
    """TOML text of an options dataclass; :func:`from_toml` reads it back equal."""
    scalars: list[str] = []
    tables: list[str] = []

    def emit(o: Any, path: tuple[str, ...]) -> None:
        lines: list[str] = []
        hints = _hints(type(o))
        for f in dataclasses.fields(o):
            v = getattr(o, f.name)
            if _unwrap_optional(hints[f.name])[0] is float and type(v) is int:
                v = float(v)  # a float setting given as an int reads back as a float
            if dataclasses.is_dataclass(v):
                emit(v, (*path, f.name))
            else:
                lines.append(f"{f.name} = {_toml_value(v)}")
        if not path:
            scalars.extend(lines)
        else:
            tables.append("[" + ".".join(path) + "]\n" + "\n".join(lines))

    emit(obj, ())
    return "\n".join(scalars) + "\n" + "".join("\n" + t + "\n" for t in tables)


def load_settings(
    cls: type[T],
    *,
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    prefix: str = "SHALEDB_",
    **overrides: Any,
) -> T:
    """Settings as the CLI and the Spark data source take them: defaults, then the TOML
    file ``path`` (or the one ``SHALEDB_SETTINGS_FILE`` names), then the environment,
    then ``overrides`` (top-level fields set by the caller, e.g. the CLI turning the
    embedded compactor off)."""
    source = os.environ if env is None else env
    data: dict[str, Any] = {}
    if path is None:
        path = source.get(SETTINGS_FILE_VARIABLE) or None
    if path is not None:
        p = Path(path)
        try:
            text = _read_text(p)
        except OSError as exc:
            raise InvalidArgument(f"cannot read settings file {str(p)!r}: {exc.strerror}") from None
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument(f"{p} is not valid TOML: {exc}") from None
        data = toml_data(cls, doc, str(p))
    from_env = env_data(cls, prefix, source)
    _merge(data, from_env)
    data.update(overrides)
    where = f"{path} and the {prefix}* environment" if path is not None else f"the {prefix}* environment"

    def render(p: tuple[str, ...]) -> str:
        # A value the environment set is named as its variable (the environment wins over
        # the file), so an error says SHALEDB_GARBAGE_COLLECTOR__INTERVAL_S, what the user set.
        return prefix + "__".join(p).upper() if _holds(from_env, p) else ".".join(p)

    return build(cls, data, render, where)


def _holds(data: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """Whether nested ``data`` has a value at ``path``."""
    for i, part in enumerate(path):
        if part not in data:
            return False
        value = data[part]
        if i == len(path) - 1:
            return True
        if not isinstance(value, Mapping):
            return False
        data = value
    return False


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = dict(v) if isinstance(v, Mapping) else v


__all__ = ["from_env", "from_file", "from_toml", "load_settings", "to_toml"]
