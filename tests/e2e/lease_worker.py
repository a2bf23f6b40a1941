"""A driver that takes a table's write lease and commits one row, in a process of its own.

Child process of ``tests/e2e/test_leases.py``: two of these share nothing but the storage
(the lease folder and the Delta table under the root). ``--machine`` makes it pose as a
process of another machine, so that the lease's same-machine liveness probe stays out of the
way and only the lease itself (expiry, generations, fencing) decides.

    python -m tests.e2e.lease_worker <root> <name> [--machine M] [--wait-s S] [--hold-s S]
        [--lease-s S] [--start-at EPOCH] [--rounds N --period S]

It prints ``ACQUIRED <generation> <epoch>``, then after holding ``COMMITTED <epoch>`` or
``ERROR [LeaseLost] ...``; ``ERROR [ConcurrentRun] ...`` when it never got the lease. Exit
code 0 committed, 2 refused (ConcurrentRun or LeaseLost). With ``--rounds`` it tries once per
round, at ``start-at + round * period``, prints ``ROUND <n> COMMITTED|REFUSED`` and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

from lakehouse.errors import LakehouseError
from lakehouse.fs import delta_storage_options
from lakehouse.leases import Holder, Lease, store_for
from lakehouse.settings import Settings

TABLE = "gold/lease_test"


def say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("name")
    parser.add_argument("--machine", default=None)
    parser.add_argument("--wait-s", type=float, default=0.0)
    parser.add_argument("--hold-s", type=float, default=0.0)
    parser.add_argument("--lease-s", type=float, default=6.0)
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--poll-s", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--period", type=float, default=2.0)
    args = parser.parse_args(argv)

    import pyarrow as pa
    from deltalake import write_deltalake

    settings = Settings.from_env().with_root(args.root)
    lease = new_lease(args, settings)
    options = delta_storage_options(settings)
    location = settings.path(TABLE)
    say("READY")
    if args.rounds:
        return rounds(args, settings, location, options)
    time.sleep(max(0.0, args.start_at - time.time()))
    try:
        lease.acquire(args.wait_s, poll_s=args.poll_s)
        say(f"ACQUIRED {lease.generation} {time.time():.3f}")
        lease.start_heartbeat()
        time.sleep(args.hold_s)
        # The fenced commit: nothing is written unless the lease is still this driver's.
        lease.check()
        row = pa.table({"owner": [args.name], "generation": [lease.generation]})
        write_deltalake(location, row, mode="append", storage_options=options)
        say(f"COMMITTED {time.time():.3f}")
        lease.release()
    except LakehouseError as exc:
        say(f"ERROR [{exc.code}] {exc}")
        return 2
    return 0


def new_lease(args: argparse.Namespace, settings: Settings) -> Lease:
    """This worker's lease of the shared table (not taken yet)."""
    return Lease(
        store_for(settings, TABLE),
        TABLE,
        args.name,
        lease_s=args.lease_s,
        holder=Holder.this_process(args.name, machine=args.machine),
    )


def rounds(
    args: argparse.Namespace, settings: Settings, location: str, options: dict[str, str]
) -> int:
    """Try for the lease once per round, all rounds at agreed times; commit when it is won."""
    import pyarrow as pa
    from deltalake import write_deltalake

    for n in range(args.rounds):
        time.sleep(max(0.0, args.start_at + n * args.period - time.time()))
        lease = new_lease(args, settings)
        try:
            lease.acquire(0.0)
        except LakehouseError as exc:
            say(f"ROUND {n} REFUSED [{exc.code}]")
            continue
        lease.check()
        row = pa.table({"owner": [args.name], "generation": [lease.generation], "round": [n]})
        write_deltalake(location, row, mode="append", storage_options=options)
        lease.release()
        say(f"ROUND {n} COMMITTED {lease.generation}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
