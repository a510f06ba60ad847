"""Sans-IO ULog format: parse bytes into events, decode data with numpy, fold whole logs.

Files are opened by the shell: :mod:`ulogstream.adapters.ulog_file` (``read``, ``iter_events``).
"""

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
