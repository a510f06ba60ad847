"""Sans-IO ULog format: parse bytes into events, decode data with numpy, fold whole logs.

Files are opened by the shell: :mod:`ulogstream.adapters.ulog_file` (``read``, ``iter_events``).
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from ulogstream.ulog.reader import TopicData, ULogData, ULogReader

_READER_NAMES = frozenset({"TopicData", "ULogData", "ULogReader"})


def __getattr__(name: str) -> object:
    """The whole-file reader's names, imported at their first use.

    The reader needs numpy at import, which a recorder that decodes no row (and the stream
    package, which imports ``spec``) should not load.
    """
    if name in _READER_NAMES:
        from ulogstream.ulog import reader  # noqa: PLC0415 (see above)

        return getattr(reader, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


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
