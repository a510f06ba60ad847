"""The recorder's status shows the upload backlog, logs resumed from the on-disk queue included."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ulogstream.config.sections import LinkSettings, RecordingSettings, Settings, UploadSettings
from ulogstream.recorder.status import status_fields
from ulogstream.recorder.wiring import UPLOAD_QUEUE_FOLDER, build_recorder
from ulogstream.upload.info import FinishedLogInfo
from ulogstream.upload.journal import PendingUpload, UploadJournal

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.recorder.recorder import Recorder


def recorder_with_waiting_logs(out: Path, count: int) -> Recorder:
    """A recorder started where ``count`` finished logs wait in the upload queue."""
    journal = UploadJournal(out / UPLOAD_QUEUE_FOLDER)
    for i in range(count):
        path = out / "2026-11-25" / f"0{i}_00_00.ulg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"ULog")
        info = FinishedLogInfo(
            path=path, size=4, sha256=None, sys_uuid=None, start_time=None, date="2026-11-25",
            vehicle="v", complete=True, how="complete",
        )  # fmt: skip
        journal.write(PendingUpload(info))
    return build_recorder(
        Settings(
            link=LinkSettings(connection="udpin:127.0.0.1:14550"),
            recording=RecordingSettings(out_dir=out, min_free_mb=0),
            upload=UploadSettings(command="true {path}", only_when_disarmed=True),
        )
    )


def test_the_status_line_and_fields_show_the_logs_waiting_for_upload(tmp_path: Path) -> None:
    recorder = recorder_with_waiting_logs(tmp_path, 2)
    recorder._count_uploads(recorder.status)

    assert recorder.status_text().endswith(", uploads 0 done 2 waiting")
    fields = status_fields(recorder.status)
    assert (fields["upload_backlog"], fields["upload_held"]) == (2, False)

    recorder.shipper.set_armed(True)
    recorder._count_uploads(recorder.status)

    assert recorder.status_text().endswith(", uploads 0 done 2 waiting (held: armed)")
    assert status_fields(recorder.status)["upload_held"] is True


def test_nothing_about_uploads_in_the_status_line_while_there_is_none(tmp_path: Path) -> None:
    recorder = recorder_with_waiting_logs(tmp_path, 0)

    assert "upload" not in recorder.status_text()
