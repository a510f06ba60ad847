"""The systemd unit, the udev rule and the Telegraf sample: valid, and consistent with Settings."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from ulogstream.config.sections import RecordingSettings, Settings

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "ulogstream.service"
RULES = ROOT / "systemd" / "99-pixhawk.rules"
TELEGRAF = ROOT / "configs" / "telegraf.conf"
PX4_VENDOR_IDS = {"26ac", "3185", "3162", "2dae"}


def unit_directives() -> dict[str, list[str]]:
    """``Section.Key`` -> every value it is given (systemd allows repeated keys)."""
    directives: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a KEY=VALUE line: {raw!r}"
        directives.setdefault(f"{section}.{key}", []).append(value)
    return directives


# --- systemd unit -----------------------------------------------------------------------------


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package 'systemd')")
    # verify checks that ExecStart exists: point it at an executable present on this machine.
    unit = tmp_path / "ulogstream.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/ulogstream", "/bin/true"))

    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )

    # Unknown or misspelt keys are only warnings (exit status 0): any mention of the unit fails.
    complaints = [line for line in result.stderr.splitlines() if "ulogstream.service" in line]
    assert (result.returncode, complaints) == (0, [])


def test_systemd_analyze_verify_would_catch_a_misspelt_key(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package 'systemd')")
    unit = tmp_path / "ulogstream.service"
    text = UNIT.read_text().replace("/usr/local/bin/ulogstream", "/bin/true")
    unit.write_text(text.replace("WatchdogSec=", "WatchDogSec="))

    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, check=False, timeout=60
    )

    assert re.search(r"Unknown key( name)? 'WatchDogSec'", result.stderr), result.stderr


def test_unit_runs_as_a_notify_service_with_watchdog_and_restart() -> None:
    unit = unit_directives()
    assert unit["Service.Type"] == ["notify"]
    assert unit["Service.NotifyAccess"] == ["main"]
    assert unit["Service.WatchdogSec"] == ["30"]
    assert unit["Service.Restart"] == ["always"]
    assert unit["Service.RestartSec"] == ["2"]
    assert unit["Service.ExecStart"] == [
        "/usr/local/bin/ulogstream run --config /etc/ulogstream/ulogstream.toml"
    ]
    assert unit["Service.ConfigurationDirectory"] == ["ulogstream"]
    assert unit["Install.WantedBy"] == ["multi-user.target"]


def test_unit_state_directory_is_the_default_recording_directory() -> None:
    unit = unit_directives()
    assert unit["Service.StateDirectory"] == ["ulogstream"]
    assert RecordingSettings().out_dir == Path("/var/lib") / unit["Service.StateDirectory"][0]
    assert Settings().systemd.watchdog


def test_unit_is_hardened_but_may_open_serial_ports() -> None:
    unit = unit_directives()
    expected = {
        "User": "ulogstream",
        "SupplementaryGroups": "dialout",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "MemoryDenyWriteExecute": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "SystemCallArchitectures": "native",
        "DevicePolicy": "closed",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    }
    assert {key: unit[f"Service.{key}"][-1] for key in expected} == expected
    assert sorted(unit["Service.DeviceAllow"]) == ["char-ttyACM rw", "char-ttyUSB rw"]


MDWE_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
    if ctypes.CDLL(None).prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        sys.exit(77)
    import asyncio, mmap
    import aiomqtt, fastcrc, msgpack, numpy as np, serial
    from pymavlink.dialects.v20 import common as mavlink2
    from ulogstream import config
    from ulogstream.adapters import file_sink, sd_notify
    rows = np.frombuffer(np.arange(64, dtype="<f4").tobytes(), dtype=[("x", "<f4")])
    assert float(rows["x"].sum()) == 2016.0
    mav = mavlink2.MAVLink(None, srcSystem=1, srcComponent=155)
    frame = mav.logging_ack_encode(target_system=1, target_component=1, sequence=7).pack(mav)
    assert mav.parse_buffer(frame)[0].sequence == 7
    assert msgpack.unpackb(msgpack.packb({"t": 1.5})) == {"t": 1.5}
    asyncio.run(asyncio.sleep(0))
    try:
        mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError:
        print("W+X refused")
    """
)


def test_dependencies_run_without_writable_executable_memory() -> None:
    # MemoryDenyWriteExecute=yes is a seccomp filter; PR_SET_MDWE (Linux 6.3+) is the kernel's
    # own version of the same rule, so the imports and calls below face what the service faces.
    result = subprocess.run(
        [sys.executable, "-c", MDWE_PROBE], capture_output=True, text=True, check=False, timeout=120
    )
    if result.returncode == 77:
        pytest.skip("this kernel has no PR_SET_MDWE (Linux >= 6.3 needed)")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "W+X refused\n"  # the rule really was in force


# --- udev rule --------------------------------------------------------------------------------

UDEV_MATCH_KEYS = {
    "ACTION", "DEVPATH", "KERNEL", "NAME", "SYMLINK", "SUBSYSTEM", "DRIVER", "ATTR", "SYSCTL",
    "KERNELS", "SUBSYSTEMS", "DRIVERS", "ATTRS", "TAGS", "ENV", "CONST", "TAG", "TEST",
    "PROGRAM", "RESULT",
}  # fmt: skip
UDEV_ASSIGN_KEYS = {
    "NAME", "SYMLINK", "OWNER", "GROUP", "MODE", "SECLABEL", "ATTR", "SYSCTL", "ENV", "TAG",
    "RUN", "LABEL", "GOTO", "IMPORT", "OPTIONS",
}  # fmt: skip
UDEV_TOKEN = re.compile(
    r'\s*(?P<key>[A-Z_]+)(?:\{(?P<attr>[^}]*)\})?\s*(?P<op>==|!=|\+=|-=|:=|=)\s*"(?P<value>[^"]*)"'
    r"\s*(?:,|$)"
)


def udev_rules() -> list[list[tuple[str, str | None, str, str]]]:
    """Each rule line as (key, attribute, operator, value) tokens; fails on unparsable text."""
    rules = []
    for number, line in enumerate(RULES.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tokens = []
        pos = 0
        while pos < len(line):
            match = UDEV_TOKEN.match(line, pos)
            assert match, f"{RULES.name}:{number}: cannot parse {line[pos:]!r}"
            tokens.append((match["key"], match["attr"], match["op"], match["value"]))
            pos = match.end()
        rules.append(tokens)
    return rules


def test_udev_rules_use_only_valid_keys_and_operators() -> None:
    for tokens in udev_rules():
        for key, _, op, _ in tokens:
            if op in {"==", "!="}:
                assert key in UDEV_MATCH_KEYS, f"{key}{op} is not a udev match key"
            else:
                assert key in UDEV_ASSIGN_KEYS, f"{key}{op} is not a udev assignment key"


def test_udev_gotos_reach_labels() -> None:
    tokens = [token for rule in udev_rules() for token in rule]
    labels = {value for key, _, _, value in tokens if key == "LABEL"}
    gotos = {value for key, _, _, value in tokens if key == "GOTO"}
    assert gotos <= labels
    assert labels == {"pixhawk_match", "pixhawk_end"}


def test_udev_rule_covers_px4_boards_and_sets_link_group_and_modemmanager_flag() -> None:
    tokens = [token for rule in udev_rules() for token in rule]
    vendors = {
        value for key, attr, op, value in tokens if (key, attr, op) == ("ATTRS", "idVendor", "==")
    }
    assert vendors == PX4_VENDOR_IDS
    assert ("ENV", "ID_MM_DEVICE_IGNORE", "=", "1") in tokens
    assert ("GROUP", None, "=", "dialout") in tokens
    assert ("MODE", None, "=", "0660") in tokens
    assert ("SYMLINK", None, "+=", "pixhawk") in tokens
    assert Path("/dev") / "pixhawk" == Path(Settings().link.connection)


def test_telegraf_sample_subscribes_to_the_json_samples_and_tags_them() -> None:
    config = tomllib.loads(TELEGRAF.read_text())
    (consumer,) = config["inputs"]["mqtt_consumer"]
    root = Settings().mqtt.root

    assert consumer["topics"] == [f"{root}/+/json/+/+"]
    assert consumer["data_format"] == "json"
    assert (consumer["json_time_key"], consumer["json_time_format"]) == ("t", "unix")
    (parsing,) = consumer["topic_parsing"]
    assert parsing["topic"] == consumer["topics"][0]
    levels = parsing["topic"].split("/")
    assert len(parsing["tags"].split("/")) == len(levels) == len(parsing["measurement"].split("/"))
    assert parsing["tags"] == "_/vehicle/_/topic/multi_id"
    assert parsing["measurement"] == "_/_/_/measurement/_"
    assert config["outputs"]["influxdb_v2"][0]["bucket"] == "ulogstream"
