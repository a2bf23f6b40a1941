"""SeaweedFS, the local S3 server: built once from source with Go, cached, and its credentials.

The version is pinned by ``tools/seaweedfs/go.mod`` (a build module that requires SeaweedFS
as a Go tool, with ``go.sum`` holding every module's hash), so every checkout builds the same
server from the Go module proxy and nothing else. The first build downloads a few GB of
modules and compiles for minutes; the binary is then kept as
``.cache/seaweedfs/weed-<version>`` and reused until the pinned version changes.

The credentials of the local server are made once and kept in
``.services/s3/credentials.json`` (mode 0600): ``lakehouse.local.services`` configures the
server with them, ``lakehouse.local.env`` exports them as ``AWS_*`` for shells and jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lakehouse.errors import ConfigurationError, GoNotFound
from lakehouse.fs import write_private
from lakehouse.settings import Settings

MODULE = "github.com/seaweedfs/seaweedfs"
WEED_PACKAGE = f"{MODULE}/weed"
DEFAULT_S3_PORT = 8333
BUCKET = "lakehouse"
# SeaweedFS accepts any region in a signature; clients only need to agree on one.
REGION = "us-east-1"


def tool_dir(settings: Settings) -> Path:
    return settings.project_dir / "tools" / "seaweedfs"


def pinned_version(settings: Settings) -> str:
    """The SeaweedFS module version ``tools/seaweedfs/go.mod`` requires."""
    go_mod = tool_dir(settings) / "go.mod"
    match = re.search(rf"^\s*{re.escape(MODULE)} (v\S+)", go_mod.read_text(), re.MULTILINE)
    if match is None:
        raise ConfigurationError(f"{go_mod} does not require {MODULE}.")
    return match.group(1)


def binary_path(settings: Settings) -> Path:
    return settings.project_dir / ".cache" / "seaweedfs" / f"weed-{pinned_version(settings)}"


def go_executable() -> str:
    """``GO`` if set, else ``go`` on PATH, else the official tarball's place."""
    candidates = [os.environ.get("GO", ""), shutil.which("go") or "", "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise GoNotFound("No Go toolchain: GO is unset, `go` is not on PATH, /usr/local/go is absent.")


def weed_binary(settings: Settings) -> Path:
    """The cached ``weed`` binary of the pinned version, built first if it is missing.

    A file lock makes a second caller (tests next to `make s3-up`) wait for the first build
    instead of starting another one; the binary appears under its final name only complete.
    """
    target = binary_path(settings)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"waiting for SeaweedFS {pinned_version(settings)}, which another process is "
                f"building (log in {target.parent / 'build.log'})",
                flush=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _build(settings, target)
    return target


def start_background_build(settings: Settings) -> subprocess.Popen[bytes] | None:
    """Start building the pinned ``weed`` in a separate process group, on idle CPU only, unless
    it is cached (then None). The test session does it as it starts, so that the build's
    downloads and compilation (minutes on a fresh machine) overlap the tests before the first
    that needs the server, which then waits for it through ``weed_binary``'s lock; a build
    that failed there is done again, in the foreground, by that first test. Its output goes
    to ``background-build.log`` beside the binary."""
    target = binary_path(settings)
    if target.exists():
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "background-build.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "lakehouse.local.seaweedfs", "--when-idle"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_background_build(process: subprocess.Popen[bytes]) -> None:
    """Stop a background build that is still running (its whole process group)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _build(settings: Settings, target: Path) -> None:
    go = go_executable()
    log_path = target.parent / "build.log"
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    print(
        f"building SeaweedFS {pinned_version(settings)} into {target} (once: downloads its Go "
        f"modules and compiles for several minutes; log in {log_path})",
        flush=True,
    )
    # Under the lock no other build runs: a partial binary left here is a killed build's.
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    t0 = time.monotonic()
    # -mod=readonly: the build uses the pins as committed and never rewrites go.mod or go.sum.
    env = {**os.environ, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -mod=readonly".strip()}
    with open(log_path, "w") as log:
        result = subprocess.run(
            [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), WEED_PACKAGE],
            cwd=tool_dir(settings),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(
            f"building SeaweedFS failed ({go} build, exit {result.returncode}):\n{tail}"
        )
    partial.replace(target)
    print(f"built SeaweedFS in {time.monotonic() - t0:.0f}s", flush=True)


# --------------------------------------------------------------------------- credentials


def s3_dir(settings: Settings) -> Path:
    return settings.project_dir / ".services" / "s3"


def credentials_path(settings: Settings) -> Path:
    return s3_dir(settings) / "credentials.json"


@dataclass(frozen=True)
class LocalCredentials:
    """The local server's one identity; the secret stays out of ``repr``."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


def local_credentials(settings: Settings, *, create: bool = False) -> LocalCredentials | None:
    """The local server's credentials; made once (0600) when ``create``, else ``None`` if the
    server was never set up."""
    path = credentials_path(settings)
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        made = {
            # The shapes AWS uses: 20 upper-case characters, 40 of base64-ish text.
            "access_key_id": "LH" + secrets.token_hex(9).upper(),
            "secret_access_key": secrets.token_urlsafe(30),
        }
        try:
            write_private(path, json.dumps(made))
        except FileExistsError:
            pass  # another process made them first; read theirs
    data = json.loads(path.read_text())
    return LocalCredentials(data["access_key_id"], data["secret_access_key"])


def s3_port(env: Mapping[str, str] | None = None) -> int:
    """``LAKEHOUSE_S3_PORT``, the local server's S3 port (8333)."""
    raw = (os.environ if env is None else env).get("LAKEHOUSE_S3_PORT", "").strip()
    if not raw:
        return DEFAULT_S3_PORT
    if not raw.isdigit() or not 1024 <= int(raw) <= 65535:
        raise ConfigurationError(f"LAKEHOUSE_S3_PORT={raw!r} is not a port in 1024..65535.")
    return int(raw)


def endpoint_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def run_when_idle() -> None:
    """This process, and every process it starts, runs only on CPU time nothing else wants
    (Linux's ``SCHED_IDLE``; elsewhere the lowest nice). At a low nice the build's compilers
    still take a share of the cores from the tests beside it: a test of 64-71 s alone took
    87-115 s beside a fresh build at nice 10, and 67-92 s beside one at ``SCHED_IDLE`` (two
    cores; docs/performance.md)."""
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
    os.nice(19)


def main() -> int:
    """Build the pinned ``weed`` unless it is cached: ``python -m lakehouse.local.seaweedfs``
    (``--when-idle``: on idle CPU only, as the test session's background build)."""
    if "--when-idle" in sys.argv[1:]:
        run_when_idle()
    print(weed_binary(Settings.from_env()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
