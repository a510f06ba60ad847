"""S3 uploads against Ceph's RADOS Gateway 16 (Debian's radosgw), a production S3 store.

Not in the suite: Debian's ceph-mon, ceph-osd and radosgw packages and a one-node cluster's
start would add about two minutes to CI's 15-minute budget. Run it where they are installed
(``apt-get install ceph-mon ceph-osd radosgw``)::

    .venv/bin/python tests/bench/check_rgw.py

It starts a monitor, one memstore OSD and the gateway in a temporary directory (no auth, one
replica), then checks what RGW answers and that each upload counts on its first attempt: a
single PUT, a multipart upload (RGW completes it with an empty ETag; the HEAD's is taken), the
same log known again by its ETag, and the parts a killed recorder left aborted by our own SigV4
ListMultipartUploads and AbortMultipartUpload (RGW checks signatures).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import obstore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.s3_logs import info_of

from ulogstream.config.sections import S3Settings
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.upload.s3 import S3Credentials, S3Target

if TYPE_CHECKING:
    from collections.abc import Iterator

KEYS = S3Credentials("RGWKEY", "RGWSECRET")
CONFIG = """[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms client mode = crc
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd objectstore = memstore
memstore device bytes = 1073741824
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
run dir = {d}/run
log file = {d}/log/$name.log
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
mon data = {d}/mon/$id
osd data = {d}/osd/$id
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=120)


@contextlib.contextmanager
def cluster(directory: Path) -> Iterator[str]:
    """A one-node Ceph cluster with RGW in ``directory``; yields the gateway's URL."""
    for folder in ("mon", "osd/0", "run", "log"):
        (directory / folder).mkdir(parents=True)
    mon_port, rgw_port, fsid = free_port(), free_port(), str(uuid.uuid4())
    conf = directory / "ceph.conf"
    conf.write_text(CONFIG.format(fsid=fsid, mon_port=mon_port, rgw_port=rgw_port, d=directory))
    c = ("-c", str(conf))
    started = time.monotonic()
    try:
        run("monmaptool", "--create", "--add", "a", f"127.0.0.1:{mon_port}", "--fsid", fsid,
            str(directory / "monmap"))  # fmt: skip
        run("ceph-mon", *c, "--mkfs", "-i", "a", "--monmap", str(directory / "monmap"))
        run("ceph-mon", *c, "-i", "a")
        run("ceph", *c, "osd", "create")
        run("ceph-osd", *c, "-i", "0", "--mkfs")
        run("ceph-osd", *c, "-i", "0")
        run("radosgw", *c, "-n", "client.rgw")
        url = f"http://127.0.0.1:{rgw_port}"
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", rgw_port), timeout=1).close()
                break
            if time.monotonic() > deadline:
                msg = f"radosgw did not answer on {rgw_port}; see {directory}/log"
                raise RuntimeError(msg)
            time.sleep(0.5)
        run("radosgw-admin", *c, "user", "create", "--uid=test", "--display-name=test",
            f"--access-key={KEYS.access_key_id}", f"--secret={KEYS.secret_access_key}")  # fmt: skip
        print(f"Ceph RGW up in {time.monotonic() - started:.1f} s at {url}")
        yield url
    finally:
        for daemon in ("radosgw", "ceph-osd", "ceph-mon"):
            subprocess.run(["pkill", "-KILL", "-f", f"{daemon} -c {conf}"], check=False)


async def check(url: str, logs: Path) -> None:
    s3 = S3Target(S3Settings(bucket="logs", endpoint_url=url, part_size_mb=5), credentials=KEYS)
    status, _ = await asyncio.to_thread(s3._signed, "PUT", "", {})
    assert status == 200, f"create bucket: HTTP {status}"
    small, big = logs / "12_00_00.ulg", logs / "13_00_00.ulg"
    generate_flight_log(small, duration_s=10.0, seed=3)
    generate_flight_log(big, duration_s=600.0, seed=7)
    put = obstore.put_async
    answers: list[str | None] = []

    async def spy(*args: object, **kwargs: object) -> object:
        result = await put(*args, **kwargs)  # type: ignore[arg-type]
        answers.append(result.get("e_tag"))
        return result

    for log in (small, big):
        info = info_of(log)
        answers.clear()

        obstore.put_async = spy  # type: ignore[assignment]
        started = time.perf_counter()
        uploaded = await s3.upload(info)  # raises unless the first attempt counts
        obstore.put_async = put
        meta = await obstore.head_async(s3._store, s3.key(info))
        print(
            f"{log.name}: {info.size} bytes, counted on its first attempt in "
            f"{time.perf_counter() - started:.2f} s ({uploaded.location}); completion ETag "
            f"{answers[0]!r}, HEAD ETag {meta['e_tag']}"
        )
        obstore.put_async = _refuse  # type: ignore[assignment]
        assert (await s3.upload(info)).location == uploaded.location
        obstore.put_async = put
        print(f"{log.name}: known again by its ETag, not sent twice")
    info = info_of(big, vehicle="uav-9")
    status, _ = await asyncio.to_thread(s3._signed, "POST", s3.key(info), {"uploads": ""})
    assert status == 200, f"initiate: HTTP {status}"
    await s3.upload(info)
    query = {"uploads": "", "prefix": s3.key(info)}
    status, body = await asyncio.to_thread(s3._signed, "GET", "", query)
    assert status == 200, status
    assert b"<Upload>" not in body, body
    print("a killed recorder's multipart upload: aborted before the next upload (SigV4 accepted)")


async def _refuse(*_args: object, **_kwargs: object) -> None:
    msg = "the log was sent again"
    raise AssertionError(msg)


def main() -> int:
    missing = [name for name in ("ceph-mon", "ceph-osd", "radosgw") if not shutil.which(name)]
    if missing:
        print(f"needs Debian's {' '.join(missing)} (apt-get install ceph-mon ceph-osd radosgw)")
        return 2
    with tempfile.TemporaryDirectory(prefix="rgw-") as temporary:
        root = Path(temporary)
        logs = root / "logs" / "2026-11-25"
        logs.mkdir(parents=True)
        with cluster(root / "ceph") as url:
            asyncio.run(check(url, logs))
    print("Ceph RGW: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
