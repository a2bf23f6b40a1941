"""The write lease as a state machine, on a fake clock and an in-memory store: who may take
it when, and that a holder stops believing in it before anyone else can take it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lakehouse.errors import ConcurrentRun, LeaseLost
from lakehouse.leases import (
    Entry,
    Holder,
    Lease,
    LeaseState,
    LocalLeaseStore,
    decide,
    lease_folder,
    lease_name,
    machine_id,
    margin_s,
    process_gone,
)

LEASE_S = 20.0


@dataclass
class World:
    """One clock for the storage and every holder (the storage's clock is what counts)."""

    now: float = 1_000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class MemoryStore:
    world: World
    objects: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    where: str = "memory"
    requests: int = 0

    def entries(self) -> tuple[list[Entry], float]:
        self.requests += 1
        return [Entry(n, m) for n, (_, m) in self.objects.items()], self.world.now

    def create(self, name: str, data: bytes) -> bool:
        self.requests += 1
        if name in self.objects:
            return False
        self.objects[name] = (data, self.world.now)
        return True

    def read(self, name: str) -> bytes | None:
        self.requests += 1
        found = self.objects.get(name)
        return found[0] if found else None

    def delete(self, name: str) -> None:
        self.requests += 1
        self.objects.pop(name, None)


def lease(world: World, store: MemoryStore, owner: str, machine: str) -> Lease:
    return Lease(
        store,
        "silver/orders",
        owner,
        lease_s=LEASE_S,
        clock=world.clock,
        sleep=world.sleep,
        holder=Holder(owner, f"host-{machine}", 4242, machine, "77"),
    )


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def store(world: World) -> MemoryStore:
    return MemoryStore(world)


def test_one_writer_at_a_time_and_release_frees_at_once(world: World, store: MemoryStore) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    assert a.generation == 1 and a.taken_because == "never taken"
    b = lease(world, store, "b", "m2")
    with pytest.raises(ConcurrentRun, match=r"a \(pid 4242 on host-m1\), lease generation 1"):
        b.acquire(wait_s=0)
    a.check()
    a.release()
    b.acquire(wait_s=0)
    assert (b.generation, b.taken_because) == (2, "released by generation 1")
    # The older generation's objects are tidied away by the new holder.
    assert sorted(store.objects) == [lease_name(2)]
    with pytest.raises(LeaseLost):
        a.check()  # released: never again


def test_a_silent_holder_loses_the_lease_after_lease_s_and_knows_it_first(
    world: World, store: MemoryStore
) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    b = lease(world, store, "b", "m2")
    # Renewed in time, it keeps the lease however long it runs.
    for _ in range(8):
        world.now += a.heartbeat_s
        a.renew()
    with pytest.raises(ConcurrentRun):
        b.acquire(wait_s=0)
    assert len([n for n in store.objects if ".beat" in n]) <= 2, "old heartbeats are deleted"

    # Then it is paused. It stops believing in its lease before anyone may take it.
    paused_at = world.now
    world.now = paused_at + LEASE_S - margin_s(LEASE_S)
    with pytest.raises(LeaseLost, match="not renewed for"):
        a.check()
    free, why = decide(b.look(), gone=None)
    assert not free, why
    world.now = paused_at + LEASE_S + 0.5
    b.acquire(wait_s=0)
    assert b.generation == 2 and "expired: silent for 20.5s" in b.taken_because

    # Woken up, it cannot renew, check or release what is no longer its own.
    with pytest.raises(LeaseLost):
        a.renew()
    a.release()
    b.check()


def test_a_stale_holder_is_fenced_by_the_storage_too(world: World, store: MemoryStore) -> None:
    """Even with a clock that did not notice the pause, the listing shows the new
    generation and the old holder's check refuses."""
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    world.now += LEASE_S + 1
    b = lease(world, store, "b", "m2").acquire(wait_s=0)
    a.valid_until = world.now + 100  # as if its clock had stood still
    with pytest.raises(LeaseLost, match="generation 2 of b"):
        a.check()
    b.check()


def test_a_waiter_takes_over_within_the_lease_time(world: World, store: MemoryStore) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    died_at = world.now  # never renews again
    b = lease(world, store, "b", "m2").acquire(wait_s=LEASE_S * 3, poll_s=1.0)
    assert b.generation == 2
    assert LEASE_S < world.now - died_at <= LEASE_S + 1.0
    with pytest.raises(LeaseLost):
        a.check()


def test_a_waiter_gives_up_while_the_holder_renews(world: World, store: MemoryStore) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    b = lease(world, store, "b", "m2")

    def renewing_sleep(seconds: float) -> None:
        world.now += seconds
        if world.now - a.valid_until > -margin_s(LEASE_S):
            a.renew()

    b.sleep = renewing_sleep
    with pytest.raises(ConcurrentRun, match=r"waited 60s"):
        b.acquire(wait_s=60)
    a.check()


def test_of_two_takers_exactly_one_creates_the_generation(world: World, store: MemoryStore) -> None:
    a, b = lease(world, store, "a", "m1"), lease(world, store, "b", "m2")
    seen_by_b = b.look()  # b looks, then a takes it before b creates
    a.acquire(wait_s=0)
    assert store.create(lease_name(seen_by_b.generation + 1), b"{}") is False
    with pytest.raises(ConcurrentRun):
        b.acquire(wait_s=0)


def test_the_holder_of_a_gone_process_on_this_machine_loses_at_once(
    world: World, store: MemoryStore
) -> None:
    lease(world, store, "a", "m1").acquire(wait_s=0)
    state = LeaseState.of(*store.entries(), store.read)
    assert decide(state, gone=None)[0] is False
    free, why = decide(state, gone=True)
    assert free and "is gone" in why


def test_the_kernel_tells_a_gone_process_only_on_its_own_machine() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = machine_id()
        assert here, "this test runs on Linux"
        holder = Holder.this_process("child", machine=here)
        holder = Holder("child", holder.host, child.pid, here, _ticks(child.pid))
        assert process_gone(holder, here) is False
        assert process_gone(holder, "another-machine") is None
    finally:
        child.kill()
        child.wait()
    assert process_gone(holder, here) is True
    # The same pid with another start time is another process.
    me = Holder.this_process("me")
    assert process_gone(Holder("me", me.host, os.getpid(), here, "1"), here) is True


def _ticks(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]


def test_the_state_ignores_strangers_and_reads_the_newest_generation(
    world: World, store: MemoryStore
) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    store.objects["README"] = (b"", 0.0)
    store.objects["g0000000001.beatX"] = (b"", 0.0)
    world.now += 5
    a.renew()
    state = a.look()
    assert (state.generation, state.beat, state.released, state.silent_s) == (1, 0, False, 0.0)
    assert state.record is not None and state.record.holder.owner == "a"
    assert lease_folder("silver/orders") == "_locks/silver__orders"


def test_a_local_folder_creates_each_name_once(tmp_path: Path) -> None:
    store = LocalLeaseStore(tmp_path / "_locks" / "t")
    assert store.create("g0000000001.lease", b"first") is True
    assert store.create("g0000000001.lease", b"second") is False
    assert store.read("g0000000001.lease") == b"first"
    entries, now = store.entries()
    assert [e.name for e in entries] == ["g0000000001.lease"]  # no staging files left
    assert abs(now - entries[0].modified) < 5
    store.delete("g0000000001.lease")
    assert store.read("g0000000001.lease") is None


def test_a_lease_folder_cleaned_by_hand_still_fences_the_old_holder(
    world: World, store: MemoryStore
) -> None:
    a = lease(world, store, "a", "m1").acquire(wait_s=0)
    a.check()
    store.objects.clear()  # someone deleted _locks/ while a held it
    world.now += 1
    b = lease(world, store, "b", "m2").acquire(wait_s=0)
    assert b.generation == a.generation == 1  # the numbers start again, the token differs
    with pytest.raises(LeaseLost, match="generation 1 of b"):
        a.check()
    b.check()
