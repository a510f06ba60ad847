"""Settings from a TOML file and command-line overrides: parsing, conversion, suggestions.

Errors name the source (file or command line), the dotted key and what is wrong, and are raised
as :class:`~ulogstream.errors.ConfigError`; an unknown key is answered with the nearest known one.
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, get_args, get_origin

import msgspec

from ulogstream.config.sections import (
    GROUPS,
    BackfillSettings,
    FoxgloveSettings,
    LinkSettings,
    LogSettings,
    MqttSettings,
    RecordingSettings,
    Settings,
    SystemdSettings,
    UploadSettings,
)
from ulogstream.config.values import SettingError
from ulogstream.errors import ConfigError

_Section = typing.TypeVar("_Section", bound=msgspec.Struct)


_S3_KEYS = "use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or upload.s3.credentials_file"


_INLINE_SECRETS = {
    "mqtt.password": "use mqtt.password_file or mqtt.password_env",
    "upload.s3.access_key_id": _S3_KEYS,
    "upload.s3.secret_access_key": _S3_KEYS,
}


COMMAND_LINE = "command line"
"""The source named in errors about ``overrides``."""


def load_settings(
    path: Path | None, overrides: Mapping[str, object] = types.MappingProxyType({})
) -> Settings:
    """Load ``path`` (None: defaults only), then apply ``overrides``.

    Args:
        path: A TOML file with the sections of :class:`Settings`.
        overrides: Dotted keys (``"mqtt.qos"``, ``"mqtt.rates.vehicle_attitude"``) and values,
            from the command line; they win over the file. None values are skipped.

    Raises:
        ConfigError: Naming the file (or "command line"), the key and what is wrong.
    """
    source = str(path) if path is not None else "defaults"
    raw: dict[str, object] = {}
    if path is not None:
        raw = _read_toml(path)
    sources: dict[str, str] = {}
    groups: dict[str, dict[str, object]] = {}
    for section, table in raw.items():
        if section not in GROUPS:
            msg = f"{source}: unknown section [{section}]{_suggest(section, GROUPS)}"
            raise ConfigError(msg)
        if not isinstance(table, dict):
            msg = f"{source}: {section} must be a table ([{section}]), not {_describe(table)}"
            raise ConfigError(msg)
        for name, value in table.items():
            key = f"{section}.{name}"
            groups.setdefault(section, {})[name] = _convert(key, value, source)
            sources[key] = source
    for key, value in overrides.items():
        if value is None:
            continue
        section, name, entry = _split_key(key, COMMAND_LINE)
        if entry is None:
            groups.setdefault(section, {})[name] = _convert(key, value, COMMAND_LINE)
        else:
            table = groups.setdefault(section, {})
            old = table.get(name, {})
            merged = dict(old) if isinstance(old, dict) else {}
            merged[entry] = _convert_entry(key, value, COMMAND_LINE)
            table[name] = merged
        sources[f"{section}.{name}"] = COMMAND_LINE
    try:
        return Settings(
            link=LinkSettings(**groups.get("link", {})),  # type: ignore[arg-type]
            recording=RecordingSettings(**groups.get("recording", {})),  # type: ignore[arg-type]
            mqtt=MqttSettings(**groups.get("mqtt", {})),  # type: ignore[arg-type]
            foxglove=FoxgloveSettings(**groups.get("foxglove", {})),  # type: ignore[arg-type]
            backfill=BackfillSettings(**groups.get("backfill", {})),  # type: ignore[arg-type]
            upload=_build(UploadSettings, groups.get("upload", {})),
            log=LogSettings(**groups.get("log", {})),  # type: ignore[arg-type]
            systemd=SystemdSettings(**groups.get("systemd", {})),  # type: ignore[arg-type]
        )
    except SettingError as err:
        where = sources.get(err.key) or sources.get(err.key.rpartition(".")[0], source)
        msg = f"{where}: {err}"
        raise ConfigError(msg) from None


def _build(cls: type[_Section], values: dict[str, object]) -> _Section:
    """``cls(**values)``, each sub-section's table (``[upload.flight_review]``) built first."""
    built = dict(values)
    for name, hint in typing.get_type_hints(cls).items():
        if _is_section(hint) and isinstance(built.get(name), dict):
            table = typing.cast("dict[str, object]", built[name])
            built[name] = _build(hint, table)
    return cls(**built)


def _is_section(hint: object) -> typing.TypeGuard[type[msgspec.Struct]]:
    """Whether a setting's type ``hint`` is a sub-section (a settings struct)."""
    return isinstance(hint, type) and issubclass(hint, msgspec.Struct)


def parse_override(text: str) -> tuple[str, object]:
    """Parse a ``KEY=VALUE`` command-line option; VALUE is TOML (``5``, ``true``, ``["a"]``).

    Settings that take text (strings, paths, choices) take VALUE as it is, so
    ``link.connection=/dev/ttyACM0`` and ``mqtt.vehicle_id=7`` need no quotes; quoted TOML
    strings are unquoted.

    Raises:
        ConfigError: ``text`` is not ``KEY=VALUE`` or names an unknown key.
    """
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        msg = f"{COMMAND_LINE}: expected KEY=VALUE (e.g. mqtt.qos=1), not {text!r}"
        raise ConfigError(msg)
    section, name, entry = _split_key(key, COMMAND_LINE)
    try:
        parsed: object = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    hint = _field_hint(section, name, COMMAND_LINE)
    if entry is not None and _is_section(hint):
        hint = _entry_hint(hint, f"{section}.{name}", entry, COMMAND_LINE)
    elif entry is not None:
        return key, parsed
    if _takes_text(hint):
        return key, parsed if isinstance(parsed, str) else value.strip()
    return key, parsed


def _takes_text(hint: object) -> bool:
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) is types.UnionType and len(args) == 1:
        return _takes_text(args[0])
    if get_origin(hint) is Literal:
        return all(isinstance(a, str) for a in args)
    return hint in {str, Path}


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        msg = f"config file {path} does not exist"
        raise ConfigError(msg) from None
    except OSError as err:
        msg = f"config file {path} cannot be read: {err.strerror}"
        raise ConfigError(msg) from err
    except tomllib.TOMLDecodeError as err:
        msg = f"{path}: invalid TOML: {err}"
        raise ConfigError(msg) from None
    except UnicodeDecodeError as err:
        msg = f"{path}: not UTF-8 text (byte {err.start}); TOML files are UTF-8: save it as UTF-8"
        raise ConfigError(msg) from None


def _split_key(key: str, source: str) -> tuple[str, str, str | None]:
    """Split ``section.name[.entry]``; ``entry`` only for tables (rates, sub-sections)."""
    parts = key.split(".", 2)
    if parts[0] not in GROUPS:
        msg = f"{source}: unknown key {key}{_suggest(key, all_keys(), dotted=True)}"
        raise ConfigError(msg)
    if len(parts) == 1:
        msg = f"{source}: {key} is a section; name a key in it, e.g. {key}.{_names(key)[0]}"
        raise ConfigError(msg)
    section, name = parts[0], parts[1]
    entry = parts[2] if len(parts) == 3 else None  # noqa: PLR2004
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        if entry is None:
            first = hint.__struct_fields__[0]
            msg = f"{source}: {key} is a section; name a key in it, e.g. {key}.{first}"
            raise ConfigError(msg)
        _entry_hint(hint, f"{section}.{name}", entry, source)
        return section, name, entry
    if entry is not None and get_origin(hint) is not Mapping:
        msg = f"{source}: unknown key {key}; {section}.{name} is not a table"
        raise ConfigError(msg)
    if entry is None and get_origin(hint) is Mapping:
        msg = f"{source}: {key} is a table; set one entry, e.g. {key}.vehicle_attitude"
        raise ConfigError(msg)
    return section, name, entry


def _names(section: str) -> list[str]:
    return list(GROUPS[section].__struct_fields__)


def all_keys() -> list[str]:
    """Every dotted key of :class:`Settings` (``link.connection``, ..., ``systemd.watchdog``).

    A sub-section's keys are named in full (``upload.flight_review.url``).
    """
    keys: list[str] = []
    for section, cls in GROUPS.items():
        hints = typing.get_type_hints(cls)
        for name in _names(section):
            hint = hints[name]
            if _is_section(hint):
                keys += [f"{section}.{name}.{field}" for field in hint.__struct_fields__]
            else:
                keys.append(f"{section}.{name}")
    return keys


def _entry_hint(cls: type[msgspec.Struct], table: str, entry: str, source: str) -> object:
    """The type of the key ``entry`` of the sub-section ``table`` (of settings class ``cls``)."""
    key = f"{table}.{entry}"
    if key in _INLINE_SECRETS:
        msg = f"{source}: {key} is never accepted inline; {_INLINE_SECRETS[key]}"
        raise ConfigError(msg)
    hints = typing.get_type_hints(cls)
    if entry not in hints:
        names = list(cls.__struct_fields__)
        suggestion = _suggest(entry, names, dotted=True, prefix=f"{table}.")
        msg = f"{source}: unknown key {table}.{entry}{suggestion}"
        raise ConfigError(msg)
    hint: object = hints[entry]
    return hint


def _field_hint(section: str, name: str, source: str) -> object:
    key = f"{section}.{name}"
    if key in _INLINE_SECRETS:
        msg = f"{source}: {key} is never accepted inline; {_INLINE_SECRETS[key]}"
        raise ConfigError(msg)
    hints = typing.get_type_hints(GROUPS[section])
    if name not in hints:
        suggestion = _suggest(name, _names(section), dotted=True, prefix=f"{section}.")
        msg = f"{source}: unknown key {key}{suggestion}"
        raise ConfigError(msg)
    hint: object = hints[name]
    return hint


def _suggest(
    word: str, candidates: Iterable[str], *, dotted: bool = False, prefix: str = ""
) -> str:
    import difflib  # noqa: PLC0415 (only a mistyped key needs it)

    close = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {prefix}{close[0]}?)" if dotted else f" (did you mean [{close[0]}]?)"


def _convert(key: str, value: object, source: str) -> object:
    section, _, name = key.partition(".")
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        if not isinstance(value, dict):
            msg = f"{source}: {key} must be a section ([{key}]), not {_describe(value)}"
            raise ConfigError(msg)
        return {
            str(k): _coerce(f"{key}.{k}", v, _entry_hint(hint, key, str(k), source), source)
            for k, v in value.items()
        }
    if get_origin(hint) is Mapping:
        if not isinstance(value, dict):
            msg = f"{source}: {key} must be a table of numbers, not {_describe(value)}"
            raise ConfigError(msg)
        return {str(k): _convert_entry(f"{key}.{k}", v, source) for k, v in value.items()}
    return _coerce(key, value, hint, source)


def _convert_entry(key: str, value: object, source: str) -> object:
    section, name, entry = key.split(".", 2)
    hint = _field_hint(section, name, source)
    if _is_section(hint):
        return _coerce(key, value, _entry_hint(hint, f"{section}.{name}", entry, source), source)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    msg = f"{source}: {key} must be a number, not {_describe(value)}"
    raise ConfigError(msg)


def _coerce(key: str, value: object, hint: object, source: str) -> object:
    """Check ``value`` against the type ``hint`` (TOML types; Path from str) and convert it."""
    args = get_args(hint)
    origin = get_origin(hint)
    if origin is types.UnionType and type(None) in args:
        if value is None:
            return None
        (hint,) = (a for a in args if a is not type(None))
        return _coerce(key, value, hint, source)
    expected: str
    if hint is bool:
        if isinstance(value, bool):
            return value
        expected = "true or false"
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif hint is str:
        if isinstance(value, str):
            return value
        expected = "a string"
    elif hint is Path:
        if isinstance(value, str | Path) and str(value):
            return Path(value)
        expected = "a path (a non-empty string)"
    elif origin is Literal:
        if value in args and isinstance(value, str):
            return value
        choices = ", ".join(repr(a) for a in args)
        msg = f"{source}: {key} must be one of {choices}, not {_describe(value)}"
        raise ConfigError(msg)
    elif origin is tuple:
        if isinstance(value, list | tuple):
            return tuple(_coerce(f"{key}[{i}]", v, args[0], source) for i, v in enumerate(value))
        expected = "a list"
    else:  # pragma: no cover (a Settings field of a type this loader does not know)
        msg = f"no TOML conversion for {key} of type {hint!r}"
        raise TypeError(msg)
    msg = f"{source}: {key} must be {expected}, not {_describe(value)}"
    raise ConfigError(msg)


def _describe(value: object) -> str:
    match value:
        case bool():
            return f"a boolean ({str(value).lower()})"
        case int():
            return f"an integer ({value})"
        case float():
            return f"a number ({value})"
        case str():
            return f"a string ({value!r})"
        case list() | tuple():
            return "a list"
        case dict():
            return "a table"
        case _:
            return f"a {type(value).__name__} ({value})"
