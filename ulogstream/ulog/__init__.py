"""Sans-IO ULog format: parse bytes into events, decode data with numpy, fold whole logs.

Files are opened by the shell: :mod:`ulogstream.adapters.ulog_file` (``read``, ``iter_events``).

Each name below is imported from its module at its first use: the stream package imports
``spec`` alone (and so this package), and a recorder that decodes no row should load neither
the parser's event classes nor numpy.
"""

from typing import TYPE_CHECKING

from ulogstream.lazy import load_lazily

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
        RowLayout,
        Subscription,
        Sync,
        Truncated,
        ULogEvent,
        UndecodedRows,
        Unsubscription,
    )
    from ulogstream.ulog.parser import ULogParser
    from ulogstream.ulog.reader import TopicData, ULogData, ULogReader

_MODULES = {
    "CompiledFormat": "ulogstream.ulog.dtypes",
    "compile_format": "ulogstream.ulog.dtypes",
    "decode_row": "ulogstream.ulog.dtypes",
    "field_names": "ulogstream.ulog.dtypes",
    "nested_dtype": "ulogstream.ulog.dtypes",
    "parse_format": "ulogstream.ulog.dtypes",
    "row_dict": "ulogstream.ulog.dtypes",
    "string_fields": "ulogstream.ulog.dtypes",
    "Corruption": "ulogstream.ulog.events",
    "DataRows": "ulogstream.ulog.events",
    "DefinitionsEnd": "ulogstream.ulog.events",
    "Dropout": "ulogstream.ulog.events",
    "FieldDefinition": "ulogstream.ulog.events",
    "FileHeader": "ulogstream.ulog.events",
    "FlagBits": "ulogstream.ulog.events",
    "FormatDefined": "ulogstream.ulog.events",
    "Info": "ulogstream.ulog.events",
    "InfoMultiple": "ulogstream.ulog.events",
    "InfoValue": "ulogstream.ulog.events",
    "LoggedString": "ulogstream.ulog.events",
    "Parameter": "ulogstream.ulog.events",
    "ParameterDefault": "ulogstream.ulog.events",
    "ParserWarning": "ulogstream.ulog.events",
    "RowLayout": "ulogstream.ulog.events",
    "Subscription": "ulogstream.ulog.events",
    "Sync": "ulogstream.ulog.events",
    "Truncated": "ulogstream.ulog.events",
    "ULogEvent": "ulogstream.ulog.events",
    "UndecodedRows": "ulogstream.ulog.events",
    "Unsubscription": "ulogstream.ulog.events",
    "ULogParser": "ulogstream.ulog.parser",
    "TopicData": "ulogstream.ulog.reader",
    "ULogData": "ulogstream.ulog.reader",
    "ULogReader": "ulogstream.ulog.reader",
}
"""The module of ``ulogstream.ulog`` each name comes from."""


def __getattr__(name: str) -> object:
    return load_lazily(globals(), _MODULES, name)


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
    "RowLayout",
    "Subscription",
    "Sync",
    "TopicData",
    "Truncated",
    "ULogData",
    "ULogEvent",
    "ULogParser",
    "ULogReader",
    "UndecodedRows",
    "Unsubscription",
    "compile_format",
    "decode_row",
    "field_names",
    "nested_dtype",
    "parse_format",
    "row_dict",
    "string_fields",
]
