"""Settings, load_settings() and their messages; configs/ulogstream.toml stays the defaults."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from ulogstream.config.loader import all_keys, load_settings, parse_override
from ulogstream.config.sections import (
    LinkSettings,
    MqttSettings,
    RecordingSettings,
    Settings,
    mqtt_password,
)
from ulogstream.config.values import (
    BrokerAddress,
    SettingError,
    parse_connection,
    parse_mqtt_url,
    read_password,
)
from ulogstream.errors import ConfigError

DEFAULTS_FILE = Path(__file__).resolve().parents[2] / "configs" / "ulogstream.toml"
SETTING_LINE = re.compile(r"^(?P<commented># )?(?P<key>\w+) = ")


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ulogstream.toml"
    path.write_text(text)
    return path


def config_error(tmp_path: Path, text: str) -> str:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


def override_error(overrides: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(None, overrides)
    return str(info.value)


def documented_keys() -> dict[str, bool]:
    """Dotted key -> True when it is commented out, for every setting line of the defaults file."""
    keys: dict[str, bool] = {}
    section = ""
    for line in DEFAULTS_FILE.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            keys[section] = False
        elif match := SETTING_LINE.match(line):
            keys[f"{section}.{match['key']}"] = bool(match["commented"])
    return keys


# --- the defaults file ----------------------------------------------------------------------


def test_the_defaults_file_loads_as_the_defaults() -> None:
    assert load_settings(DEFAULTS_FILE) == Settings()
    assert load_settings(None) == Settings()


def test_every_setting_is_documented_in_the_defaults_file() -> None:
    documented = documented_keys()
    missing = [key for key in all_keys() if key not in documented]
    assert missing == []


def test_every_setting_line_is_preceded_by_a_comment() -> None:
    lines = DEFAULTS_FILE.read_text().splitlines()
    uncommented = [
        line
        for before, line in itertools.pairwise(lines)
        if SETTING_LINE.match(line) and not before.startswith("#")
    ]
    assert uncommented == []


def test_the_commented_examples_are_valid_settings(tmp_path: Path) -> None:
    # Uncomment every example (password_env excluded: it conflicts with password_file on purpose).
    text = DEFAULTS_FILE.read_text()
    uncommented = re.sub(r"^# (?!password_env)(\w+ = )", r"\1", text, flags=re.MULTILINE)

    settings = load_settings(write_config(tmp_path, uncommented))

    assert settings.link.target_sysid == 1
    assert settings.link.signing_key_file == Path("/etc/ulogstream/signing.key")
    assert settings.mqtt.url == "mqtt://localhost:1883"
    assert settings.mqtt.vehicle_id == "drone1"
    assert settings.mqtt.tls_cert_file == Path("/etc/ulogstream/client.pem")
    assert settings.mqtt.password_file == Path("/etc/ulogstream/mqtt-password")
    assert settings.mqtt.rates == {"vehicle_attitude": 50.0, "battery_status": 1.0}
    assert settings.mqtt.rate_hz("battery_status") == 1.0
    assert settings.mqtt.rate_hz("sensor_combined") == 10.0


# --- loading ----------------------------------------------------------------------------------


def test_a_file_sets_every_kind_of_value(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
        [link]
        connection = "udpin:0.0.0.0:14540"
        target_sysid = 42
        [recording]
        out_dir = "/srv/logs"
        idle_timeout_s = 3
        [mqtt]
        url = "mqtts://broker.example:8883"
        protocol = "5"
        encodings = ["json", "msgpack"]
        include = ["vehicle_*"]
        [mqtt.rates]
        vehicle_attitude = 50
        [log]
        status_line = false
        """,
    )

    settings = load_settings(path)

    assert settings.link == LinkSettings(connection="udpin:0.0.0.0:14540", target_sysid=42)
    assert settings.recording == RecordingSettings(out_dir=Path("/srv/logs"), idle_timeout_s=3.0)
    assert isinstance(settings.recording.idle_timeout_s, float)
    assert settings.mqtt.url == "mqtts://broker.example:8883"
    assert settings.mqtt.protocol == "5"
    assert settings.mqtt.encodings == ("json", "msgpack")
    assert settings.mqtt.include == ("vehicle_*",)
    assert settings.mqtt.rates == {"vehicle_attitude": 50.0}
    assert not settings.log.status_line


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[mqtt]\nqos = 1\n[mqtt.rates]\na = 1.0\nb = 2.0\n")

    settings = load_settings(
        path,
        {"mqtt.qos": 2, "mqtt.rates.b": 5, "recording.out_dir": "/srv/x", "mqtt.url": None},
    )

    assert settings.mqtt.qos == 2
    assert settings.mqtt.rates == {"a": 1.0, "b": 5.0}
    with pytest.raises(TypeError):
        settings.mqtt.rates["c"] = 1.0  # type: ignore[index]
    assert settings.recording.out_dir == Path("/srv/x")
    assert settings.mqtt.url is None  # None means "not given on the command line"


def test_broker_urls_are_url_then_urls() -> None:
    mqtt = MqttSettings(url="mqtt://a", urls=("mqtt://b:1884", "mqtts://c"))
    assert mqtt.broker_urls() == ("mqtt://a", "mqtt://b:1884", "mqtts://c")
    assert MqttSettings(urls=("mqtt://b",)).broker_urls() == ("mqtt://b",)
    assert MqttSettings().broker_urls() == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[mqtt]\nvehicle_id = '{host}'",
            (
                "mqtt.vehicle_id has an unknown placeholder {host}; use {hostname}, {link}, "
                "{sysid}, {sys_uuid}"
            ),
        ),
        ("[mqtt]\nclient_id = 'x-{sysid}'", "mqtt.client_id has an unknown placeholder {sysid}"),
        ("[mqtt]\nvehicle_id = 'x-{'", "mqtt.vehicle_id is not a valid template"),
        ("[mqtt]\nurls = ['mqtt://a', 'http://b']", "mqtt.urls must start with mqtt://"),
        ("[mqtt]\nurl = 'mqtt://a'\nurls = ['mqtt://a']", "mqtt.urls names a broker twice"),
        ("[mqtt]\nkeepalive_s = 0", "mqtt.keepalive_s must be >= 1 s, not 0"),
        ("[mqtt]\nmax_messages_per_s = -1", "mqtt.max_messages_per_s must be >= 0"),
        ("[mqtt]\nretained_resend_per_s = 0", "mqtt.retained_resend_per_s must be > 0"),
        (
            "[upload]\ncommand = 'cp {path} /x/{nme}'",
            (
                "upload.command has an unknown placeholder {nme}; use {path}, {name}, {stem}, "
                "{vehicle}, {date}, {sha256}"
            ),
        ),
        ("[upload]\ncommand = 'cp /x /y'", "upload.command must name the log with {path}"),
        ("[upload]\ncommand = 'cp \"{path} /y'", "upload.command cannot be split into words"),
        ("[upload]\ncommand = ''", "upload.command must not be empty"),
        ("[upload]\nattempts = 0", "upload.attempts must be >= 1, not 0"),
        ("[upload]\ntimeout_s = 0", "upload.timeout_s must be > 0 s"),
    ],
)
def test_fleet_settings_are_checked_with_one_clear_line(
    tmp_path: Path, text: str, message: str
) -> None:
    error = config_error(tmp_path, text)

    assert message in error
    assert error.startswith(str(tmp_path))
    assert "\n" not in error


# --- error messages: file, key, problem -----------------------------------------------------


def test_unknown_key_suggests_the_closest_one(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, "[mqtt]\ndefault_rate = 5\n") == (
        f"{path}: unknown key mqtt.default_rate (did you mean mqtt.default_rate_hz?)"
    )


def test_unknown_key_without_a_close_match(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, "[link]\nxyzzy = 5\n") == f"{path}: unknown key link.xyzzy"


def test_unknown_section_suggests_the_closest_one(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, "[mqt]\nurl = 'mqtt://h'\n") == (
        f"{path}: unknown section [mqt] (did you mean [mqtt]?)"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[mqtt]\nqos = '1'", "mqtt.qos must be an integer, not a string ('1')"),
        ("[mqtt]\nqos = true", "mqtt.qos must be an integer, not a boolean (true)"),
        ("[log]\nstatus_line = 1", "log.status_line must be true or false, not an integer (1)"),
        ("[mqtt]\ndefault_rate_hz = 'fast'", "mqtt.default_rate_hz must be a number, not a string"),
        ("[mqtt]\nurl = 1883", "mqtt.url must be a string, not an integer (1883)"),
        ("[mqtt]\nencodings = 'json'", "mqtt.encodings must be a list, not a string ('json')"),
        ("[mqtt]\ninclude = [1]", "mqtt.include[0] must be a string, not an integer (1)"),
        ("[mqtt]\nrates = 5", "mqtt.rates must be a table of numbers, not an integer (5)"),
        ("[mqtt.rates]\nx = 'fast'", "mqtt.rates.x must be a number, not a string ('fast')"),
        ("[recording]\nout_dir = ''", "recording.out_dir must be a path (a non-empty string)"),
        ("[recording]\nout_dir = []", "recording.out_dir must be a path (a non-empty string)"),
        ("link = 5", "link must be a table ([link]), not an integer (5)"),
        (
            "[mqtt]\nprotocol = 5",
            "mqtt.protocol must be one of '3.1.1', '5', not an integer (5)",
        ),
        (
            "[mqtt]\nencodings = ['json', 'xml']",
            "mqtt.encodings[1] must be one of 'json', 'msgpack', 'ulog', not a string ('xml')",
        ),
        ("[link]\nsysid = 1.5", "link.sysid must be an integer, not a number (1.5)"),
        ("[link]\ntarget_sysid = {}", "link.target_sysid must be an integer, not a table"),
        ("[link]\ncompid = 2026-01-01", "link.compid must be an integer, not a date (2026-01-01)"),
    ],
)
def test_wrong_types_name_file_key_and_value(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, text).startswith(f"{path}: {problem}")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[mqtt]\ndefault_rate_hz = -1", "mqtt.default_rate_hz must be >= 0 Hz, not -1.0"),
        ("[mqtt.rates]\nvehicle_attitude = -5", "mqtt.rates.vehicle_attitude must be >= 0 Hz"),
        ("[mqtt]\nqos = 3", "mqtt.qos must be 0, 1 or 2, not 3"),
        ("[mqtt]\nurl = 'mqtt://h:0'", "mqtt.url has port 0, which is not from 1 to 65535"),
        ("[mqtt]\nurl = 'mqtt://h:99999'", "mqtt.url is not a valid URL"),
        ("[mqtt]\nurl = 'http://h'", "mqtt.url must start with mqtt:// or mqtts://"),
        ("[mqtt]\nurl = 'mqtt://'", "mqtt.url has no host name"),
        (
            "[mqtt]\nurl = 'mqtt://me:secret@h'",
            (
                "mqtt.url must not contain a user name or password; use mqtt.username and "
                "mqtt.password_file or mqtt.password_env"
            ),
        ),
        ("[mqtt]\nurl = 'mqtt://me@h'", "mqtt.url must not contain a user name or password"),
        ("[mqtt]\nurl = 'mqtt://h/topic'", "mqtt.url must be only scheme, host and port"),
        ("[mqtt]\nurl = 'mqtt://h?x=1'", "mqtt.url must be only scheme, host and port"),
        ("[mqtt]\nroot = 'a/#'", "mqtt.root must be a non-empty topic without '+', '#' or NUL"),
        ("[mqtt]\nroot = '/a'", "mqtt.root must not start or end with '/'"),
        ("[mqtt]\nroot = 'a/'", "mqtt.root must not start or end with '/'"),
        (
            "[mqtt]\nroot = 'a//b'",
            "mqtt.root must not start or end with '/' or hold an empty level ('//'), not 'a//b'",
        ),
        ("[mqtt]\nvehicle_id = ''", "mqtt.vehicle_id must be one non-empty topic level"),
        ("[mqtt.rates]\nx = nan", "mqtt.rates.x must be >= 0 Hz, not nan"),
        ("[mqtt]\nvehicle_id = 'a/b'", "mqtt.vehicle_id must be one non-empty topic level"),
        ("[mqtt]\nencodings = []", "mqtt.encodings must list at least one encoding"),
        ("[mqtt]\nencodings = ['json', 'json']", "mqtt.encodings lists an encoding twice"),
        ("[mqtt]\noutbox_size = 0", "mqtt.outbox_size must be >= 1, not 0"),
        ("[mqtt]\ntls_cert_file = 'c.pem'", "mqtt.tls_key_file must be set together with"),
        ("[mqtt]\ntls_key_file = 'c.key'", "mqtt.tls_cert_file must be set together with"),
        (
            "[mqtt]\nusername = 'u'\npassword_file = 'p'\npassword_env = 'P'",
            "mqtt.password_env cannot be set together with mqtt.password_file",
        ),
        ("[mqtt]\nusername = 'u'\npassword_env = ''", "mqtt.password_env must name a variable"),
        (
            "[mqtt]\npassword_env = 'P'",
            "mqtt.username must be set when a password is (mqtt.password_file or",
        ),
        (
            "[mqtt]\npassword = 'hunter2'",
            "mqtt.password is never accepted inline; use mqtt.password_file or mqtt.password_env",
        ),
        ("[link]\nsysid = 0", "link.sysid must be a MAVLink id from 1 to 255, not 0"),
        ("[link]\ncompid = 256", "link.compid must be a MAVLink id from 1 to 255, not 256"),
        ("[link]\ntarget_sysid = 0", "link.target_sysid must be a MAVLink id from 1 to 255"),
        ("[link]\nbaud = 0", "link.baud must be > 0, not 0"),
        ("[link]\nconnection = ' '", "link.connection must not be empty"),
        (
            "[link]\nconnection = 'udpin:0.0.0.0:70000'",
            "link.connection 'udpin:0.0.0.0:70000' is not valid (port 70000 is outside 0-65535)",
        ),
        (
            "[link]\nconnection = 'udpout:host:'",
            "link.connection 'udpout:host:' is not valid (port '' is not a number)",
        ),
        (
            "[link]\nconnection = 'tcpin:127.0.0.1:99999'",
            "link.connection 'tcpin:127.0.0.1:99999' is not valid (port 99999 is outside 0-65535)",
        ),
        ("[recording]\nmin_free_mb = -1", "recording.min_free_mb must be >= 0 MB, not -1"),
        ("[recording]\nmax_logs = -2", "recording.max_logs must be >= 0, not -2"),
        ("[recording]\nmax_total_mb = -3", "recording.max_total_mb must be >= 0 MB, not -3"),
        ("[recording]\nidle_timeout_s = 0", "recording.idle_timeout_s must be > 0 s, not 0.0"),
        ("[log]\nlevel = 'loud'", "log.level must be one of 'debug', 'info', 'warning', 'error'"),
    ],
)
def test_impossible_values_name_file_key_and_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, text).startswith(f"{path}: {problem}")


def test_invalid_toml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    assert config_error(tmp_path, "[mqtt]\nqos = \n") == (
        f"{path}: invalid TOML: Invalid value (at line 2, column 7)"
    )


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^config file {tmp_path}/nope.toml does not exist$"):
        load_settings(tmp_path / "nope.toml")


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"^config file {tmp_path} cannot be read: "):
        load_settings(tmp_path)  # a directory


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mqtt.qos": 3}, "command line: mqtt.qos must be 0, 1 or 2, not 3"),
        ({"mqtt.qos": "1"}, "command line: mqtt.qos must be an integer, not a string ('1')"),
        ({"mqtt.qoss": 1}, "command line: unknown key mqtt.qoss (did you mean mqtt.qos?)"),
        ({"mqt.url": "x"}, "command line: unknown key mqt.url (did you mean mqtt.url?)"),
        ({"mqtt": 1}, "command line: mqtt is a section; name a key in it, e.g. mqtt.url"),
        (
            {"mqtt.rates": 1},
            "command line: mqtt.rates is a table; set one entry, e.g. mqtt.rates.vehicle_attitude",
        ),
        ({"mqtt.qos.x": 1}, "command line: unknown key mqtt.qos.x; mqtt.qos is not a table"),
        ({"mqtt.rates.x": -1}, "command line: mqtt.rates.x must be >= 0 Hz, not -1.0"),
        ({"mqtt.rates.x": "1"}, "command line: mqtt.rates.x must be a number, not a string ('1')"),
        (
            {"mqtt.password": "hunter2"},
            (
                "command line: mqtt.password is never accepted inline; "
                "use mqtt.password_file or mqtt.password_env"
            ),
        ),
    ],
)
def test_override_errors_name_the_command_line(overrides: dict[str, object], message: str) -> None:
    assert override_error(overrides) == message


def test_an_error_is_blamed_on_the_source_of_the_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[mqtt]\nqos = 3\n")
    with pytest.raises(ConfigError, match=r"^command line: link\.sysid must be a MAVLink id"):
        load_settings(path, {"link.sysid": 0})
    with pytest.raises(ConfigError, match=f"^{path}: mqtt.qos must be 0, 1 or 2"):
        load_settings(path, {"link.sysid": 2})


def test_building_settings_in_code_validates_too() -> None:
    with pytest.raises(SettingError, match=r"^mqtt\.qos must be 0, 1 or 2, not 7$") as info:
        MqttSettings(qos=7)
    assert info.value.key == "mqtt.qos"
    assert isinstance(info.value, ValueError)


# --- command-line helpers and secrets ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mqtt.qos=1", ("mqtt.qos", 1)),
        ("mqtt.default_rate_hz = 2.5", ("mqtt.default_rate_hz", 2.5)),
        ("log.status_line=false", ("log.status_line", False)),
        ("mqtt.encodings=['json', 'ulog']", ("mqtt.encodings", ["json", "ulog"])),
        ("link.connection=/dev/ttyACM0", ("link.connection", "/dev/ttyACM0")),
        ('mqtt.vehicle_id="7"', ("mqtt.vehicle_id", "7")),
        ("mqtt.vehicle_id=7", ("mqtt.vehicle_id", "7")),
        ("mqtt.protocol=5", ("mqtt.protocol", "5")),
        ("recording.out_dir=/srv/logs", ("recording.out_dir", "/srv/logs")),
        ("mqtt.rates.vehicle_attitude=50", ("mqtt.rates.vehicle_attitude", 50)),
        ("link.target_sysid=2", ("link.target_sysid", 2)),
    ],
)
def test_parse_override_reads_toml_values(text: str, expected: tuple[str, object]) -> None:
    assert parse_override(text) == expected


def test_parse_override_output_loads() -> None:
    settings = load_settings(None, dict([parse_override("link.connection=udpin:0.0.0.0:14540")]))
    assert settings.link.connection == "udpin:0.0.0.0:14540"


@pytest.mark.parametrize("text", ["mqtt.qos", "=1"])
def test_parse_override_needs_key_and_value(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^command line: expected KEY=VALUE"):
        parse_override(text)


def test_parse_override_names_an_unknown_key() -> None:
    with pytest.raises(ConfigError, match=r"^command line: unknown key mqtt\.qoss \(did you mean"):
        parse_override("mqtt.qoss=1")


def test_password_from_a_file_uses_its_first_line(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    assert mqtt_password(MqttSettings(username="u", password_file=secret)) == "s3cret"


def test_password_from_the_environment() -> None:
    mqtt = MqttSettings(username="u", password_env="ULS_TEST_PASSWORD")  # noqa: S106 (a variable name)
    assert mqtt_password(mqtt, {"ULS_TEST_PASSWORD": "pw"}) == "pw"
    with pytest.raises(ConfigError, match=r"^mqtt.password_env names \$ULS_TEST_PASSWORD, which"):
        mqtt_password(mqtt, {})


def test_unreadable_password_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=f"^mqtt.password_file {tmp_path}/absent cannot be read: No such file"
    ):
        mqtt_password(MqttSettings(username="u", password_file=tmp_path / "absent"))


def test_no_password_configured() -> None:
    assert mqtt_password(MqttSettings(), {}) is None


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("mqtt://localhost", BrokerAddress("localhost", 1883, tls=False)),
        ("mqtts://broker.example:8884", BrokerAddress("broker.example", 8884, tls=True)),
        ("mqtt://[::1]:1999/", BrokerAddress("::1", 1999, tls=False)),
    ],
)
def test_broker_urls_are_parsed(url: str, address: BrokerAddress) -> None:
    assert parse_mqtt_url(url) == address


def test_read_password_is_the_one_reader_of_the_password_file_and_variable(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\nsecond line\n")
    mqtt = MqttSettings(username="u", password_file=secret)
    assert read_password(secret, None) == mqtt_password(mqtt) == "s3cret"
    with pytest.raises(ConfigError, match="choose one"):
        read_password(secret, "VARIABLE", {"VARIABLE": "x"})


@pytest.mark.parametrize("connection", ["udpin:127.0.0.1:0", "tcpin:127.0.0.1:0"])
def test_a_listening_link_on_port_0_is_a_valid_setting(connection: str) -> None:
    """One parser of connection strings: the configuration takes what parse_connection takes."""
    assert load_settings(None, {"link.connection": connection}).link.connection == connection
    assert parse_connection(connection).port == 0
