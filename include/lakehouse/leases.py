"""Write leases: one writer per table, across processes and machines, on every kind of root.

A kernel lock (``flock``) holds on one machine only; Airflow's one-run-at-a-time holds only
for the runs Airflow itself starts. A lease lives in the storage every driver shares, so it
also keeps apart two drivers on different hosts, a zombie and its retry, and a job started
by hand. It needs one thing from the storage: **create-if-absent** (``O_EXCL``/``link`` on a
local or NFS disk, ``If-None-Match: *`` on S3). Nothing is ever overwritten, so no store has
to offer a conditional overwrite.

The objects of a table's lease, under ``<root>/_locks/<table>/`` (``/`` in the table name
becomes ``__``):

``g<generation>.lease``
    created by whoever takes the lease; the generation is the fencing token, one above the
    newest before it. Holds the owner, host, pid, a random token and the lease time.
``g<generation>.beat<n>``
    the holder's heartbeats, one new object every quarter of the lease time.
``g<generation>.released``
    the holder let go: the next writer may take the next generation at once.

The rules:

* **Taking.** A writer looks at the newest generation. It is free if there is none, if it is
  released, if it has been silent (no new lease or heartbeat object) for longer than its lease
  time, or if its holder ran on this machine and its process is gone (the kernel's word,
  checked by pid, process start time, boot id and pid namespace). Silence is measured on one
  clock, the storage's (the objects' modification times against the server's ``Date`` on S3,
  against this machine's clock on a local disk), so clocks of different hosts never meet. A
  writer takes a free lease by creating the next generation's lease object; of two writers,
  exactly one creation succeeds. A writer that finds it held waits, up to ``wait_s``, then
  stops with ``ConcurrentRun``.
* **Holding.** A heartbeat thread renews the lease; the holder believes in it only until
  ``lease_s - margin`` after the start of its last successful renewal (on ``CLOCK_BOOTTIME``,
  which keeps counting while the process is stopped or the machine sleeps). Since a waiter
  waits for ``lease_s`` of silence on the storage's clock, the holder has stopped believing
  before anyone can take over.
* **Fencing.** Before every commit the holder calls ``check()``: its own deadline, then one
  listing to see that the newest generation is still its own. A holder that was paused past
  its lease (SIGSTOP, a long GC pause, a network partition) fails that check with
  ``LeaseLost`` and commits nothing; the heartbeat thread also tells the job at once, which
  stops its query. What remains is the time between a passed check and the commit it guards:
  see the README (Going to a cluster) for what each store adds there.

``LeaseState`` and ``decide`` are the pure state machine, tested with a fake clock.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lakehouse.errors import ConcurrentRun, ConfigurationError, LakehouseError, LeaseLost

if TYPE_CHECKING:
    from lakehouse.s3 import S3Client, S3Config
    from lakehouse.settings import Settings

LOCK_DIR = "_locks"
_NAME = re.compile(r"^g(\d{10})\.(lease|released|beat(\d{8}))$")

log = logging.getLogger("lakehouse.leases")


def boottime() -> float:
    """Seconds on a clock that keeps counting while the process is stopped or the machine is
    suspended (``CLOCK_BOOTTIME`` on Linux; monotonic elsewhere)."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def lease_name(generation: int) -> str:
    return f"g{generation:010d}.lease"


def beat_name(generation: int, n: int) -> str:
    return f"g{generation:010d}.beat{n:08d}"


def released_name(generation: int) -> str:
    return f"g{generation:010d}.released"


def margin_s(lease_s: float) -> float:
    """How long before a waiter could take over the holder stops believing in its lease:
    clock rates, and the whole seconds some stores' times are rounded to."""
    return max(2.0, lease_s * 0.2)


# -- who holds it -------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot; '' if there is no such process,
    or only its zombie): with the pid it names one process, even after the pid is reused."""
    stat = _read(f"/proc/{pid}/stat")
    if ")" not in stat:
        return ""
    fields = stat.rpartition(")")[2].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def machine_id() -> str:
    """One kernel and one pid namespace: where a pid names the same process for everyone
    ('' where that cannot be told)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot else ""


@dataclass(frozen=True)
class Holder:
    """Who took a lease: shown to those who wait, and probed on the same machine."""

    owner: str
    host: str
    pid: int
    machine: str = ""
    started: str = ""

    @classmethod
    def this_process(cls, owner: str, machine: str | None = None) -> Holder:
        return cls(
            owner,
            socket.gethostname(),
            os.getpid(),
            machine_id() if machine is None else machine,
            _start_ticks(os.getpid()),
        )

    def describe(self) -> str:
        return f"{self.owner} (pid {self.pid} on {self.host})"


def process_gone(holder: Holder, machine: str) -> bool | None:
    """Whether ``holder``'s process is gone: known only on its own machine (None elsewhere)."""
    if not machine or holder.machine != machine or not holder.started:
        return None
    return _start_ticks(holder.pid) != holder.started


@dataclass(frozen=True)
class LeaseRecord:
    """The content of a ``.lease`` object."""

    table: str
    generation: int
    token: str
    lease_s: float
    holder: Holder
    taken_at: str  # wall clock, for people only

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LeaseRecord:
        raw = json.loads(data)
        return cls(**{**raw, "holder": Holder(**raw["holder"])})


# -- the state machine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """An object in a table's lease folder and when the storage last wrote it (its clock)."""

    name: str
    modified: float


@dataclass(frozen=True)
class LeaseState:
    """A table's lease at one look: the newest generation (0: never taken), its record, its
    newest heartbeat, whether it was released, and how long it has been silent."""

    generation: int
    record: LeaseRecord | None
    beat: int
    released: bool
    silent_s: float

    @classmethod
    def of(
        cls, entries: list[Entry], now: float, read: Callable[[str], bytes | None]
    ) -> LeaseState:
        generations: dict[int, list[tuple[str, Entry]]] = {}
        for entry in entries:
            match = _NAME.match(entry.name)
            if match:
                generations.setdefault(int(match.group(1)), []).append((match.group(2), entry))
        leased = [g for g, items in generations.items() if any(k == "lease" for k, _ in items)]
        if not leased:
            return cls(0, None, -1, False, 0.0)
        generation = max(leased)
        items = generations[generation]
        beats = [int(k[4:]) for k, _ in items if k.startswith("beat")]
        activity = max(e.modified for k, e in items if k == "lease" or k.startswith("beat"))
        data = read(lease_name(generation))
        return cls(
            generation,
            None if data is None else LeaseRecord.from_bytes(data),
            max(beats, default=-1),
            any(k == "released" for k, _ in items),
            max(0.0, now - activity),
        )

    def describe(self) -> str:
        if self.record is None:
            return "another writer"
        return (
            f"{self.record.holder.describe()}, lease generation {self.generation}, "
            f"heard from {self.silent_s:.0f}s ago"
        )


def decide(state: LeaseState, gone: bool | None) -> tuple[bool, str]:
    """Whether a writer may take the next generation now, and why (pure).

    ``gone`` is what the kernel says about the holder's process (None: not on this machine).
    """
    if state.generation == 0:
        return True, "never taken"
    if state.released:
        return True, f"released by generation {state.generation}"
    if state.record is None:
        return False, "its holder's record is not readable yet"
    if state.silent_s > state.record.lease_s:
        return True, (
            f"generation {state.generation} of {state.record.holder.describe()} expired: "
            f"silent for {state.silent_s:.1f}s, lease {state.record.lease_s:.0f}s"
        )
    if gone:
        return True, (
            f"generation {state.generation}: the process of {state.record.holder.describe()} "
            "is gone"
        )
    return False, f"held by {state.describe()}"


# -- stores --------------------------------------------------------------------------------------


class LeaseStore(Protocol):
    """One table's lease folder; all a lease needs from the storage."""

    where: str

    def entries(self) -> tuple[list[Entry], float]:
        """The folder's objects and the storage's clock now (seconds since the epoch)."""
        ...

    def create(self, name: str, data: bytes) -> bool:
        """Create ``name`` with ``data`` if no object has that name; False if one has."""
        ...

    def read(self, name: str) -> bytes | None: ...

    def delete(self, name: str) -> None: ...


class LocalLeaseStore:
    """A folder on a local or network disk: create-if-absent is ``link()`` of a complete
    temporary file (atomic and exclusive on local disks and on NFS alike). The clock is the
    file system's: the time it stamps on a file touched now (on NFS, the server's)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.where = str(folder)

    def _now(self) -> float:
        probe = self.folder / f".clock.{socket.gethostname()}.{os.getpid()}"
        try:
            probe.touch()
            os.utime(probe, None)  # stamped by the file system (NFS: "set to server time")
            return probe.stat().st_mtime
        except FileNotFoundError:
            return time.time()  # no folder yet: nothing to compare with
        finally:
            probe.unlink(missing_ok=True)

    def entries(self) -> tuple[list[Entry], float]:
        now = self._now()
        try:
            found = [
                Entry(e.name, e.stat().st_mtime)
                for e in os.scandir(self.folder)
                if not e.name.startswith(".")
            ]
        except FileNotFoundError:
            found = []
        return found, now

    def create(self, name: str, data: bytes) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        staging = self.folder / f".{name}.{uuid.uuid4().hex}"
        with open(staging, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(staging, self.folder / name)
        except FileExistsError:
            return False
        finally:
            staging.unlink(missing_ok=True)
        return True

    def read(self, name: str) -> bytes | None:
        try:
            return (self.folder / name).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> None:
        (self.folder / name).unlink(missing_ok=True)


class S3LeaseStore:
    """A key prefix in a bucket: create-if-absent is a PUT with ``If-None-Match: *``; times
    are the server's (objects' ``LastModified`` against the ``Date`` of the listing)."""

    def __init__(self, client: S3Client, prefix: str) -> None:
        self.client = client
        self.prefix = prefix.strip("/") + "/"
        self.where = f"s3://{client.bucket}/{self.prefix}"

    def entries(self) -> tuple[list[Entry], float]:
        objects, server_time = self.client.list_objects(self.prefix)
        now = server_time.timestamp() if server_time else time.time()
        return [
            Entry(o.key[len(self.prefix) :], o.last_modified.timestamp())
            for o in objects
            if "/" not in o.key[len(self.prefix) :]
        ], now

    def create(self, name: str, data: bytes) -> bool:
        return self.client.put_if_absent(self.prefix + name, data)

    def read(self, name: str) -> bytes | None:
        return self.client.get(self.prefix + name)

    def delete(self, name: str) -> None:
        self.client.delete(self.prefix + name)


def lease_folder(table: str) -> str:
    """The lease folder of ``table``, relative to the root."""
    return f"{LOCK_DIR}/{table.strip('/').replace('/', '__')}"


def store_for(settings: Settings, table: str, s3: S3Config | None = None) -> LeaseStore:
    """The lease store of ``table`` under the settings' root (``s3``: the credentials for an
    S3 root, default ``S3Config.from_env``).

    Raises
    ------
    ConfigurationError
        For a root on a store the lease has no create-if-absent for yet.
    """
    from lakehouse.s3 import S3Client, S3Config, is_s3_uri, split_uri

    if settings.root_is_local:
        root = Path(settings.root.removeprefix("file://").removeprefix("file:"))
        return LocalLeaseStore(root / lease_folder(table))
    if is_s3_uri(settings.root):
        bucket, key = split_uri(settings.path(lease_folder(table)))
        return S3LeaseStore(S3Client(s3 or S3Config.from_env(), bucket), key)
    raise ConfigurationError(
        f"LAKEHOUSE_ROOT={settings.root}: the write lease needs create-if-absent, which this "
        "project implements for local or NFS paths and for S3 (s3a://) only.",
        "Put the root on S3 or a shared disk, or add a lease store for this scheme "
        "(lakehouse.leases.LeaseStore).",
    )


# -- the lease -----------------------------------------------------------------------------------


@dataclass
class Lease:
    """One table's write lease, taken by ``acquire`` and kept by a heartbeat thread.

    Parameters
    ----------
    store
        The table's lease folder.
    table, owner
        What is locked and who asks (shown to those who wait).
    lease_s
        How long a silent holder keeps the lease.
    clock, sleep
        The holder's clock (``boottime``) and how to wait: injected by the tests.
    holder
        This process (``Holder.this_process``); a test may pose as another machine.
    """

    store: LeaseStore
    table: str
    owner: str
    lease_s: float = 30.0
    clock: Callable[[], float] = boottime
    sleep: Callable[[float], None] = time.sleep
    holder: Holder | None = None
    generation: int = 0
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    valid_until: float = 0.0
    beat: int = -1
    lost: LeaseLost | None = None
    taken_because: str = ""
    waited_s: float = 0.0
    _callbacks: list[Callable[[LeaseLost], None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _records: dict[tuple[str, float], bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.holder is None:
            self.holder = Holder.this_process(self.owner)

    @property
    def heartbeat_s(self) -> float:
        return self.lease_s / 4

    def look(self) -> LeaseState:
        """One listing, and a read of the newest generation's record the first time it is
        seen (a record is never rewritten: an object of the same name and time is the same
        record, one created again after a clean-up is not)."""
        entries, now = self.store.entries()
        modified = {e.name: e.modified for e in entries}

        def read(name: str) -> bytes | None:
            key = (name, modified.get(name, -1.0))
            if key not in self._records:
                data = self.store.read(name)
                if data is None:
                    return None
                self._records[key] = data
            return self._records[key]

        return LeaseState.of(entries, now, read)

    def _gone(self, state: LeaseState) -> bool | None:
        assert self.holder is not None
        if state.record is None:
            return None
        return process_gone(state.record.holder, self.holder.machine)

    # -- taking and letting go

    def acquire(self, wait_s: float, poll_s: float = 1.0) -> Lease:
        """Take the lease, waiting up to ``wait_s`` while someone else holds it.

        Raises
        ------
        ConcurrentRun
            When it is still held after ``wait_s``, naming the holder.
        """
        assert self.holder is not None
        start = self.clock()
        while True:
            state = self.look()
            free, reason = decide(state, self._gone(state))
            if free:
                generation = state.generation + 1
                record = LeaseRecord(
                    self.table,
                    generation,
                    self.token,
                    self.lease_s,
                    self.holder,
                    datetime.now(UTC).isoformat(),
                )
                t0 = self.clock()
                if self.store.create(lease_name(generation), record.to_bytes()):
                    self.generation, self.beat = generation, -1
                    self.valid_until = t0 + self.lease_s - margin_s(self.lease_s)
                    self.taken_because = reason
                    self.waited_s = round(t0 - start, 3)
                    log.info(
                        "lease of %s: generation %d taken (%s)", self.table, generation, reason
                    )
                    self._forget_older()
                    return self
                reason = f"generation {generation} was taken by another writer first"
            waited = self.clock() - start
            if waited >= wait_s:
                if free:
                    state = self.look()
                raise ConcurrentRun(
                    f"{self.table} is being written by {state.describe()}; waited {waited:.0f}s."
                )
            self.sleep(0.05 if free else min(poll_s, max(0.05, wait_s - waited)))

    def _forget_older(self) -> None:
        """Remove the objects of older generations (best effort: they only cost a listing)."""
        try:
            for entry in self.store.entries()[0]:
                match = _NAME.match(entry.name)
                if match and int(match.group(1)) < self.generation:
                    self.store.delete(entry.name)
        except (OSError, LakehouseError) as exc:
            log.warning("lease of %s: could not tidy old generations: %s", self.table, exc)

    def release(self) -> None:
        """Let go: the next writer may take over at once. A lost lease is left alone."""
        self.stop_heartbeat()
        if self.lost is not None or self.generation == 0:
            return
        try:
            self.store.create(released_name(self.generation), b"{}")
            for n in range(max(0, self.beat - 1), self.beat + 1):
                self.store.delete(beat_name(self.generation, n))
        except (OSError, LakehouseError) as exc:
            # It expires on its own after lease_s.
            log.warning("lease of %s: could not release (%s); it expires", self.table, exc)
        log.info("lease of %s: generation %d released", self.table, self.generation)

    # -- holding

    def _lose(self, reason: str) -> LeaseLost:
        with self._lock:
            if self.lost is None:
                self.lost = LeaseLost(
                    f"the write lease of {self.table} (generation {self.generation}) was lost: "
                    f"{reason}; nothing more is committed."
                )
                log.error("%s", self.lost)
                callbacks = list(self._callbacks)
            else:
                return self.lost
        for callback in callbacks:
            try:
                callback(self.lost)
            except Exception:
                log.exception("lease of %s: a callback on its loss failed", self.table)
        return self.lost

    def _verify(self, state: LeaseState) -> None:
        if state.generation != self.generation or (
            state.record is not None and state.record.token != self.token
        ):
            raise self._lose(f"generation {state.generation} of {state.describe()} took over")
        if state.released:
            raise self._lose("it was released")

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is still this holder's: its own deadline
        first (no I/O), then one look at the storage. Call it before every commit."""
        if self.lost is not None:
            raise self.lost
        late = self.clock() - self.valid_until
        if late >= 0:
            raise self._lose(
                f"not renewed for {self.lease_s - margin_s(self.lease_s) + late:.1f}s "
                "(paused, or cut off from the storage)"
            )
        self._verify(self.look())

    def renew(self) -> None:
        """One heartbeat: make sure it is still ours, then leave a new heartbeat object."""
        if self.lost is not None:
            raise self.lost
        t0 = self.clock()
        if t0 >= self.valid_until:
            raise self._lose(f"not renewed within {self.lease_s:.0f}s")
        self._verify(self.look())
        n = self.beat + 1
        self.store.create(beat_name(self.generation, n), self.token.encode())
        self.beat = n
        self.valid_until = t0 + self.lease_s - margin_s(self.lease_s)
        if n >= 2:
            self.store.delete(beat_name(self.generation, n - 2))

    def on_lost(self, callback: Callable[[LeaseLost], None]) -> None:
        """Call ``callback`` (from the heartbeat thread) as soon as the lease is lost."""
        with self._lock:
            lost = self.lost
            if lost is None:
                self._callbacks.append(callback)
        if lost is not None:
            callback(lost)

    def start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._heartbeat, name=f"lease-{self.table}", daemon=True
        )
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.lease_s)
        self._thread = None

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.renew()
            except LeaseLost:
                return
            except (OSError, LakehouseError) as exc:
                # The storage did not answer: try again; the deadline decides.
                log.warning("lease of %s: renewal failed: %s", self.table, exc)
                if self.clock() >= self.valid_until:
                    self._lose(f"no renewal got through within {self.lease_s:.0f}s")
                    return
