"""``ulogstream info|messages|params|export``: output content, and one-line errors on bad input."""

from __future__ import annotations

import gc
import io
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from pyulog import ULog

from ulogstream.cli import SUBCOMMANDS, main
from ulogstream.cli.files import default_kinds, summarize
from ulogstream.cli.terminal import ProgressLine
from ulogstream.sim.flightlog import _PERF_PREFLIGHT
from ulogstream.ulog.flight import version_string
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from pathlib import Path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _assert_one_error_line(status: int, err: str, *needles: str) -> None:
    assert status != 0
    assert err.startswith("ulogstream: error: ")
    assert err.endswith("\n")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err


def _small_log(path: Path, *, tail: bytes = b"") -> Path:
    """A tiny log with two dropouts, a corrupt stretch and ``tail`` appended."""
    writer = ULogWriter(timestamp_us=1_000_000)
    writer.flag_bits()
    writer.format("t:uint64_t timestamp;float x;")
    msg_id = writer.add_logged_message("t")
    for i in range(10):
        writer.data(msg_id, (2_000_000 + i * 100_000).to_bytes(8, "little") + bytes(4))
        if i in {3, 6}:
            writer.dropout(150 if i == 3 else 50)
    writer.message(0, b"")  # type 0, size 0: cannot be a message
    writer.message(0, b"")
    writer.sync()
    writer.data(msg_id, (3_100_000).to_bytes(8, "little") + bytes(4))
    path.write_bytes(writer.getvalue() + tail)
    return path


def test_start_up_sets_its_objects_aside_and_collection_goes_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The collector is off while the command's modules load, frozen over them, then back on."""
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    status, _, _ = _run(capsys, "info", str(_small_log(tmp_path / "log.ulg")))
    assert status == 0
    assert gc.isenabled()  # a daemon's cycles are still freed
    assert gc.get_freeze_count() > 10_000  # the modules' objects, set aside
    gc.unfreeze()
    gc.disable()  # a caller that had turned collection off keeps it off
    try:
        _run(capsys, "info", str(tmp_path / "log.ulg"))
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


# --- info -----------------------------------------------------------------------------------


def test_info_shows_version_duration_and_topics_with_rates(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, err = _run(capsys, "info", str(flight_log))
    assert (status, err) == (0, "")
    assert "ULog version 1" in out
    assert "Logging start time: 0:00:16, duration: 0:00:19" in out
    assert "SW version: v1.15.2\n" in out
    assert " ver_sw_release: 17761023 (v1.15.2)\n" in out
    assert " sys_name: PX4\n" in out
    assert "Dropouts: none" in out
    assert "Corruption: none" in out
    assert "Truncated" not in out
    assert "Parameters: 57 initial, 2 changed, 13 defaults" in out
    assert "Logged messages: 10 (1 tagged)" in out
    lines = {line.split(" (")[0].strip(): line for line in out.splitlines() if " (" in line}
    assert lines["sensor_combined"].split()[-3:] == ["4000", "200.0", "192000"]
    assert lines["vehicle_attitude"].split()[-2] == "100.0"
    assert "sensor_gyro (1, 44)" in out  # as in the file: trailing padding left out
    # multi-info is counted, not shown, without --verbose
    assert "perf_counter_preflight: 1" in out
    assert "logger_sd_write" not in out


def test_info_nonempty_hides_topic_instances_without_data(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    writer = ULogWriter(timestamp_us=1_000)
    writer.flag_bits()
    writer.format("busy:uint64_t timestamp;float x;")
    writer.format("idle:uint64_t timestamp;float y;")
    busy = writer.add_logged_message("busy")
    writer.add_logged_message("idle")
    writer.add_logged_message("idle", multi_id=1)
    writer.data(busy, (2_000).to_bytes(8, "little") + bytes(4))
    path = tmp_path / "log.ulg"
    path.write_bytes(writer.getvalue())
    _, everything, _ = _run(capsys, "info", str(path))
    assert "idle (0, 12)" in everything
    status, out, _ = _run(capsys, "info", "--nonempty", str(path))
    assert status == 0
    assert "busy (0, 12)" in out
    assert not any(line.lstrip().startswith("idle") for line in out.splitlines())
    assert " (2 subscribed topic instances without data not shown)\n" in out


def test_info_verbose_shows_multi_info_with_continued_pieces_joined(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, _ = _run(capsys, "info", "--verbose", str(flight_log))
    assert status == 0
    assert " perf_counter_preflight [0]:\n" in out
    for line in _PERF_PREFLIGHT.splitlines():
        assert f"   {line}\n" in out  # lines cut between 'M' pieces come out whole


def test_info_reports_dropouts_corruption_and_truncation(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _small_log(tmp_path / "damaged.ulg", tail=b"\x20\x00D\x00\x00\x01")
    status, out, _ = _run(capsys, "info", str(log))
    assert status == 0
    assert "Dropouts: count 2, total 0.2 s, max 150 ms, mean 100 ms" in out
    assert "Corruption: 1 region(s)" in out
    assert "Truncated: the log ends 6 bytes into a message at offset" in out
    assert " t (0, 12)" in out


def test_version_string_names_the_release_type() -> None:
    assert version_string(0x010F02FF) == "v1.15.2"
    assert version_string(0x010E00C0) == "v1.14.0 (RC)"
    assert version_string(0x01110080) == "v1.17.0 (beta)"
    assert version_string(0x01110040) == "v1.17.0 (alpha)"
    assert version_string(0x010B0200) == "v1.11.2 (dev)"


# --- messages -------------------------------------------------------------------------------


def test_messages_lists_logged_strings_with_time_level_and_tag(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, _ = _run(capsys, "messages", str(flight_log))
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 10
    assert lines[0].split(maxsplit=2) == [
        "0.080",
        "INFO",
        "[logger] /fs/microsd/log/2024-05-01/10_00_00.ulg",
    ]
    assert any(line.split()[1:3] == ["WARNING", "Preflight:"] for line in lines)
    assert any(line.split()[1] == "DEBUG" for line in lines)
    tagged = [line for line in lines if "[tag 327]" in line]
    assert tagged == ["    19.700 INFO    [tag 327] [commander] Mission finished, landed"]
    times = [float(line.split()[0]) for line in lines]
    assert times == sorted(times)


# --- params ---------------------------------------------------------------------------------


def test_params_shows_initial_values_sorted_in_their_shortest_form(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, _ = _run(capsys, "params", str(flight_log))
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 57
    assert lines == sorted(lines)
    assert "MC_ROLLRATE_P 0.15" in lines  # float32 on the wire, shown as written
    assert "SYS_AUTOSTART 4001" in lines
    assert not any(line.startswith("#") for line in lines)


def test_params_changes_have_times_since_start(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, _ = _run(capsys, "params", "--changes", str(flight_log))
    assert status == 0
    rows = [line.split() for line in out.splitlines()]
    assert [row[1:] for row in rows] == [["MPC_XY_CRUISE", "7.5"], ["COM_DISARM_LAND", "1.0"]]
    assert float(rows[0][0]) == pytest.approx(8.0, abs=0.05)
    assert float(rows[1][0]) == pytest.approx(18.0, abs=0.05)


def test_params_defaults_name_their_kind(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    status, out, _ = _run(capsys, "params", "--defaults", str(flight_log))
    assert status == 0
    lines = out.splitlines()
    assert "SYS_AUTOSTART 0 system" in lines
    assert "SYS_AUTOSTART 4001 current_setup" in lines
    assert "MPC_THR_HOVER 0.5 system,current_setup" in lines


def test_params_all_prints_every_section_under_a_heading(
    capsys: pytest.CaptureFixture[str], flight_log: Path
) -> None:
    _, out, _ = _run(capsys, "params", "--all", str(flight_log))
    headings = [line for line in out.splitlines() if line.startswith("#")]
    assert headings == ["# initial values", "# changes (seconds since start)", "# defaults"]
    assert len(out.splitlines()) == 3 + 57 + 2 + 13


def test_default_kinds_names_unknown_bits() -> None:
    assert default_kinds(0) == "none"
    assert default_kinds(0b101) == "system,0x04"


# --- export ---------------------------------------------------------------------------------


def test_export_csv_reports_what_it_wrote(
    capsys: pytest.CaptureFixture[str], flight_log: Path, tmp_path: Path
) -> None:
    status, out, err = _run(capsys, "export", str(flight_log), "--out", str(tmp_path / "csv"))
    assert (status, err) == (0, "")
    assert out.startswith("wrote 16 CSV files (")
    assert (tmp_path / "csv" / "flight_sensor_gyro_1.csv").is_file()


@pytest.mark.parametrize(
    ("kind", "suffix", "magic"),
    [("mcap", ".mcap", b"\x89MCAP0\r\n"), ("rosbag", ".bag", b"#ROSBAG V2.0\n")],
)
def test_export_rosbag_and_mcap_write_their_file_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, suffix: str, magic: bytes
) -> None:
    log = _small_log(tmp_path / "small.ulg")
    out_file = tmp_path / f"out{suffix}"
    status, out, err = _run(capsys, "export", str(log), "-f", kind, "-o", str(out_file))
    assert status == 0
    # The log's corrupt stretch is exported around, and said.
    assert err.splitlines() == [
        (
            f"ulogstream: warning: {log}: skipped 6 corrupt bytes in 1 region, the first at"
            " byte 278: message header with a zero type or size"
        )
    ]
    assert out.startswith(f"wrote {out_file}: 1 topics, 11 messages")
    assert out_file.read_bytes().startswith(magic)
    status, _, err = _run(capsys, "export", str(log), "-f", kind, "-o", str(out_file))
    _assert_one_error_line(status, err, str(out_file), "already exists")


@pytest.mark.parametrize(
    "order",
    [
        ["{log}", "--format", "rosbag", "{out}"],  # as the issue writes it: OUT after the options
        ["{log}", "{out}", "--format", "rosbag"],
        ["--format", "rosbag", "{log}", "{out}"],
    ],
)
def test_export_takes_the_output_as_a_positional_anywhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, order: list[str]
) -> None:
    log = _small_log(tmp_path / "small.ulg")
    out_file = tmp_path / "flight.bag"
    argv = [arg.format(log=log, out=out_file) for arg in order]
    status, out, err = _run(capsys, "export", *argv)
    assert out.startswith(f"wrote {out_file}")
    assert status == 0
    assert "error" not in err
    assert out_file.read_bytes().startswith(b"#ROSBAG V2.0\n")


@pytest.mark.parametrize("outputs", [["a.bag", "-o", "b.bag"], ["-f", "mcap"]])
def test_export_refuses_two_outputs_or_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, outputs: list[str]
) -> None:
    log = _small_log(tmp_path / "small.ulg")
    with pytest.raises(SystemExit) as info:
        main(["export", str(log), *outputs])
    _, err = capsys.readouterr()
    _assert_one_error_line(int(str(info.value.code)), err, "one output")


@pytest.mark.parametrize(
    ("name", "magic"), [("out.mcap", b"\x89MCAP0\r\n"), ("out.bag", b"#ROSBAG")]
)
def test_export_takes_the_format_from_the_extension(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, magic: bytes
) -> None:
    """Issue 21 item 11: ``export FILE out.mcap`` writes MCAP, not a CSV folder named out.mcap."""
    log = _small_log(tmp_path / "small.ulg")
    status, out, _ = _run(capsys, "export", str(log), str(tmp_path / name))
    assert status == 0
    assert out.startswith(f"wrote {tmp_path / name}: ")
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_export_refuses_an_extension_that_names_no_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _small_log(tmp_path / "small.ulg")
    status, _, err = _run(capsys, "export", str(log), str(tmp_path / "out.json"))
    _assert_one_error_line(status, err, "cannot tell the export format", "--format")
    assert not (tmp_path / "out.json").exists()


def test_export_warns_when_the_format_and_the_extension_disagree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _small_log(tmp_path / "small.ulg")
    out_file = tmp_path / "x.mcap"
    status, _, err = _run(capsys, "export", str(log), "--format", "rosbag", str(out_file))
    assert status == 0
    assert f"warning: writing rosbag to {out_file}, whose extension says mcap" in err
    assert out_file.read_bytes().startswith(b"#ROSBAG V2.0\n")  # as asked


def noisy_log(path: Path) -> Path:
    """A log whose 'A' message for topic ``t`` was overwritten by 4 KiB of noise."""
    writer = ULogWriter(timestamp_us=1_000_000)
    writer.flag_bits()
    writer.format("t:uint64_t timestamp;float x;")
    writer.format("u:uint64_t timestamp;float y;")
    kept = writer.add_logged_message("u")
    before = len(writer.getvalue())
    lost = writer.add_logged_message("t")
    after = len(writer.getvalue())
    for i in range(256):
        writer.data(lost, (2_000_000 + i * 1000).to_bytes(8, "little") + bytes(4))
        for j in range(3):  # a real log's other topics, between two rows of the lost one
            writer.data(kept, (2_000_000 + i * 1000 + j).to_bytes(8, "little") + bytes(4))
    log = writer.getvalue()
    noise = bytes((i * 7 + 3) % 256 for i in range(4096))  # no valid message in it
    path.write_bytes(log[:before] + noise + log[after:])
    return path


def test_info_counts_data_without_its_subscription_apart_from_damage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 21 item 12: noise took an 'A' message; its 256 rows are not 256 damaged regions."""
    log = noisy_log(tmp_path / "noisy.ulg")
    status, out, _ = _run(capsys, "info", str(log))
    assert status == 0
    # The noise, and the first row after it: resynchronising takes two plausible messages in
    # a row, and a row without its subscription cannot be told from noise.
    assert "Corruption: 1 region(s), 4113 bytes skipped, at offsets 130\n" in out
    assert "Data without subscription: 255 message(s) (msg_id 1: 255)" in out
    assert " u (0, 12)                                               768" in out


@pytest.mark.parametrize("kind", ["csv", "mcap", "rosbag"])
def test_exports_summarise_their_warnings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    log = noisy_log(tmp_path / "noisy.ulg")
    out_path = tmp_path / {"csv": "csv", "mcap": "out.mcap", "rosbag": "out.bag"}[kind]
    status, _, err = _run(capsys, "export", str(log), str(out_path))
    assert status == 0
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(
        f"ulogstream: warning: {log}: skipped 4113 corrupt bytes in 1 region"
    )
    assert lines[1].startswith(
        f"ulogstream: warning: {log}: skipped 255 data messages without a subscription"
        " (msg_id 1: 255; their 'A' message was lost), the first at byte "
    )


def test_export_warns_about_corruption_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _small_log(tmp_path / "damaged.ulg")
    status, _, err = _run(capsys, "export", str(log), "-o", str(tmp_path / "csv"))
    assert status == 0
    assert err.startswith(f"ulogstream: warning: {log}: skipped ")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_redraws_on_a_terminal_only() -> None:
    terminal = _Terminal()
    progress = ProgressLine(terminal, "exporting x.ulg")
    for done in (0, 1_000_000, 1_000_001, 2_000_000):
        progress(done, 2_000_000)
    progress.done()
    progress.done()
    assert terminal.getvalue() == (
        "\r\x1b[Kexporting x.ulg:   0% (0.0 of 2.0 MB)"
        "\r\x1b[Kexporting x.ulg:  50% (1.0 of 2.0 MB)"
        "\r\x1b[Kexporting x.ulg: 100% (2.0 of 2.0 MB)\n"
    )
    narrow = _Terminal()
    cut = ProgressLine(narrow, "exporting a-very-long-name-" + "x" * 80 + ".ulg")
    cut(1, 2)
    width = shutil.get_terminal_size().columns  # a StringIO has no terminal: $COLUMNS or 80
    assert len(narrow.getvalue()) == len("\r\x1b[K") + width - 1
    pipe = io.StringIO()
    silent = ProgressLine(pipe, "exporting")
    silent(1, 2)
    silent.done()
    assert pipe.getvalue() == ""


# --- bad input: one line on stderr, non-zero exit -------------------------------------------


@pytest.mark.parametrize("command", ["info", "messages", "params", "export"])
def test_missing_file_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    missing = tmp_path / "nope.ulg"
    extra = ["--out", str(tmp_path / "out")] if command == "export" else []
    status, out, err = _run(capsys, command, str(missing), *extra)
    _assert_one_error_line(status, err, str(missing))
    assert out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["info", "messages", "params", "export"])
def test_file_that_is_not_ulog_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("these are not the logs you are looking for\n")
    extra = ["--out", str(tmp_path / "out")] if command == "export" else []
    status, _, err = _run(capsys, command, str(bogus), *extra)
    _assert_one_error_line(status, err, str(bogus), "magic")


def test_refused_incompat_flags_are_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    writer = ULogWriter()
    writer.flag_bits(incompat_flags=bytes([0x02]) + bytes(7))
    log = tmp_path / "future.ulg"
    log.write_bytes(writer.getvalue())
    status, _, err = _run(capsys, "info", str(log))
    _assert_one_error_line(status, err, str(log), "incompat")


def test_unwritable_output_directory_is_one_error_line(
    capsys: pytest.CaptureFixture[str], flight_log: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, _, err = _run(capsys, "export", str(flight_log), "--out", str(blocker / "csv"))
    _assert_one_error_line(status, err, str(blocker / "csv"))


@pytest.mark.parametrize(
    "argv",
    [["frobnicate"], ["export", "x.ulg"], ["export", "x.ulg", "-o", "d", "-f", "xls"]],
)  # a bare ``ulogstream`` shows the help: test_first_contact.py
def test_bad_arguments_are_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    _, err = capsys.readouterr()
    _assert_one_error_line(int(str(info.value.code)), err, "--help")


def test_every_subcommand_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in SUBCOMMANDS:
        with pytest.raises(SystemExit) as info:
            main([command.name, "--help"])
        assert info.value.code == 0
        assert command.help in capsys.readouterr().out


# --- a real process -------------------------------------------------------------------------


def _python_m(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    return subprocess.run(
        [sys.executable, "-m", "ulogstream", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )


def test_python_m_ulogstream_runs_info(flight_log: Path) -> None:
    result = _python_m("info", str(flight_log))
    assert result.returncode == 0, result.stderr
    assert "SW version: v1.15.2" in result.stdout
    assert result.stderr == ""


def test_python_m_ulogstream_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.ulg"
    bogus.write_bytes(b"\0" * 64)
    result = _python_m("messages", str(bogus))
    assert result.returncode == 1
    _assert_one_error_line(result.returncode, result.stderr, str(bogus))


@pytest.mark.slow
@pytest.mark.shared
def test_info_agrees_with_pyulog_on_the_sample_logs(shared_ulg_files: list[Path]) -> None:
    for log in shared_ulg_files:
        summary = summarize(log)
        ulog = ULog(str(log))
        if ulog.file_corruption or summary.problems:
            continue  # the parsers recover differently (see tests/ulog)
        assert summary.start_us == ulog.start_timestamp, log.name
        assert summary.last_us == ulog.last_timestamp, log.name
        counts = {(d.name, d.multi_id): len(d.data["timestamp"]) for d in ulog.data_list}
        ours = {key: stats.count for key, stats in summary.topics.items() if stats.count}
        assert ours == counts, log.name
        sizes = {
            (d.name, d.multi_id): sum(ULog.get_field_size(f.type_str) for f in d.field_data)
            for d in ulog.data_list
        }
        assert {key: summary.topics[key].message_size for key in sizes} == sizes, log.name
        assert len(summary.dropouts) == len(ulog.dropouts), log.name
        assert summary.initial_parameters == ulog.initial_parameters, log.name
        assert len(summary.logged_messages) == len(ulog.logged_messages) + sum(
            len(messages) for messages in ulog.logged_messages_tagged.values()
        ), log.name


@pytest.mark.parametrize("kind", ["csv", "rosbag", "mcap"])
def test_a_failed_export_leaves_nothing_behind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    not_ulog = tmp_path / "notes.ulg"
    not_ulog.write_bytes(b"these are not the bytes of a ULog file" * 4)
    out = tmp_path / "out"
    status, _, err = _run(capsys, "export", str(not_ulog), "--format", kind, str(out))
    assert status == 1
    assert f"cannot read {not_ulog}" in err
    assert not out.exists()


@pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="OpenBLAS starts no extra thread on a single core"
)
def test_numpy_starts_no_blas_threads_under_the_command_line() -> None:
    # OpenBLAS spins up a thread per core when numpy is imported (0.1 CPU s on 2 cores); live
    # decoding imports numpy and does no linear algebra, so the command line asks for one.
    count = "import os; print(len(os.listdir('/proc/self/task')))"
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}

    def threads(script: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, check=True
        )
        return int(run.stdout.split()[-1])

    assert threads(f"from ulogstream.cli import main; main([]); import numpy; {count}") == 1
    assert threads(f"import numpy; {count}") > 1  # what the line above guards against
