"""Sans-IO ULog format: parse bytes into events, decode data with numpy, fold whole logs.

Files are opened by the shell: :mod:`ulogstream.adapters.ulog_file` (``read``, ``iter_events``).

Each name below is imported from its module at its first use: the stream package imports
``spec`` alone (and so this package), and a recorder that decodes no row should load neither
the parser's event classes nor numpy.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ulogstream.ulog.dtypes import (
        CompiledFormat,
        compile_format,
        decode_row,
        field_names,
        nested_dtype,
        parse_format,
        row_dict,
        string_fields,
    )
    from ulogstream.ulog.events import (
        Corruption,
        DataRows,
        DefinitionsEnd,
        Dropout,
        FieldDefinition,
        FileHeader,
        FlagBits,
        FormatDefined,
        Info,
        InfoMultiple,
        InfoValue,
        LoggedString,
        Parameter,
        ParameterDefault,
        ParserWarning,
        Subscription,
        Sync,
        Truncated,
        ULogEvent,
        Unsubscription,
    )
    from ulogstream.ulog.parser import ULogParser
    from ulogstream.ulog.reader import TopicData, ULogData, ULogReader

_MODULES = {
    "CompiledFormat": "dtypes",
    "compile_format": "dtypes",
    "decode_row": "dtypes",
    "field_names": "dtypes",
    "nested_dtype": "dtypes",
    "parse_format": "dtypes",
    "row_dict": "dtypes",
    "string_fields": "dtypes",
    "Corruption": "events",
    "DataRows": "events",
    "DefinitionsEnd": "events",
    "Dropout": "events",
    "FieldDefinition": "events",
    "FileHeader": "events",
    "FlagBits": "events",
    "FormatDefined": "events",
    "Info": "events",
    "InfoMultiple": "events",
    "InfoValue": "events",
    "LoggedString": "events",
    "Parameter": "events",
    "ParameterDefault": "events",
    "ParserWarning": "events",
    "Subscription": "events",
    "Sync": "events",
    "Truncated": "events",
    "ULogEvent": "events",
    "Unsubscription": "events",
    "ULogParser": "parser",
    "TopicData": "reader",
    "ULogData": "reader",
    "ULogReader": "reader",
}
"""The module of ``ulogstream.ulog`` each name comes from."""


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(f"ulogstream.ulog.{module}"), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CompiledFormat",
    "Corruption",
    "DataRows",
    "DefinitionsEnd",
    "Dropout",
    "FieldDefinition",
    "FileHeader",
    "FlagBits",
    "FormatDefined",
    "Info",
    "InfoMultiple",
    "InfoValue",
    "LoggedString",
    "Parameter",
    "ParameterDefault",
    "ParserWarning",
    "Subscription",
    "Sync",
    "TopicData",
    "Truncated",
    "ULogData",
    "ULogEvent",
    "ULogParser",
    "ULogReader",
    "Unsubscription",
    "compile_format",
    "decode_row",
    "field_names",
    "nested_dtype",
    "parse_format",
    "row_dict",
    "string_fields",
]
