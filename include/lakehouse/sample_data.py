"""Realistic order events, with the bad input real feeds carry, for the demo and the tests.

Orders go through ``placed`` -> ``updated``* -> ``cancelled``?; events are delivered late,
twice and out of order; ids come as strings or integers, totals as numbers or strings.
A share of records is broken the ways the contract names (not JSON, not an object, a
missing or mistyped field, an unknown event type, a time without zone, an impossible date,
a total out of range, invalid UTF-8), and files mix ``\\n`` and ``\\r\\n`` endings and blank
lines. Everything is deterministic for a given seed.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakehouse.fs import Storage

REGIONS = ("eu-west", "eu-north", "us-east", "us-west", "ap-south")
CATEGORIES = ("books", "games", "garden", "kitchen", "toys", None)
CURRENCIES = ("EUR", "USD", "SEK", None)

# Each broken record names the rule it breaks (the reason silver must give).
INVALID_KINDS: tuple[tuple[str, str], ...] = (
    ("not_json", "not_json"),
    ("truncated", "not_json"),
    ("array", "not_object"),
    ("missing_order_id", "missing:order_id"),
    ("bool_customer", "wrong_type:customer_id"),
    ("empty_region", "empty:region"),
    ("unknown_type", "not_allowed:event_type"),
    ("no_zone", "no_zone:event_ts"),
    ("impossible_date", "impossible_date:order_ts"),
    ("negative_total", "out_of_range:total"),
    ("sci_string_total", "wrong_type:total"),
    ("missing_total", "missing:total"),
    ("float_items", "wrong_type:items_count"),
    ("bad_utf8", "invalid_utf8"),
)


def _iso(ts: datetime, rng: random.Random) -> str:
    style = rng.random()
    if style < 0.6:
        return ts.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style < 0.8:
        return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond:06d}"[:3] + "Z"
    offset_h = rng.choice((-5, 1, 2, 9))
    local = ts + timedelta(hours=offset_h)
    sign = "+" if offset_h >= 0 else "-"
    return local.strftime("%Y-%m-%dT%H:%M:%S") + f"{sign}{abs(offset_h):02d}:00"


@dataclass
class OrderEventGenerator:
    """Deterministic stream of order events. Call ``batch`` repeatedly for new deliveries."""

    seed: int = 7
    start: datetime = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    invalid_ratio: float = 0.05
    late_ratio: float = 0.05
    duplicate_ratio: float = 0.03
    rng: random.Random = field(init=False)
    # Every order so far, in the order made: a list, so that picking one is O(1).
    _orders: list[dict] = field(init=False, default_factory=list)
    _clock: datetime = field(init=False)
    _event_seq: int = field(init=False, default=0)
    _held_back: list[bytes] = field(init=False, default_factory=list)
    _invalid_seq: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._clock = self.start

    def _event(self, order: dict, event_type: str) -> dict:
        self._event_seq += 1
        self._clock += timedelta(seconds=self.rng.randint(1, 40))
        event: dict = {
            "event_id": f"e{self.seed}-{self._event_seq:08d}",
            "order_id": order["order_id"],
            "customer_id": order["customer_id"],
            "event_type": event_type,
            "order_ts": _iso(order["order_ts"], self.rng),
            "event_ts": _iso(self._clock, self.rng),
            "region": order["region"],
        }
        if self.rng.random() < 0.1:
            event["event_id"] = self._event_seq + self.seed * 10**9  # integer ids are valid
        total = order["total"]
        if event_type != "cancelled" or self.rng.random() < 0.5:
            event["total"] = str(total) if self.rng.random() < 0.2 else float(total)
        if self.rng.random() < 0.8:
            event["items_count"] = (
                order["items"] if self.rng.random() < 0.8 else str(order["items"])
            )
        for key, choices in (("currency", CURRENCIES), ("product_category", CATEGORIES)):
            value = self.rng.choice(choices)
            if value is not None:
                event[key] = value
        if self.rng.random() < 0.05:
            event["coupon"] = "WELCOME10"  # unknown fields are allowed
        return event

    def _new_order(self) -> dict:
        order_id = f"o{self.seed}-{len(self._orders) + 1:07d}"
        order = {
            "order_id": order_id
            if self.rng.random() < 0.9
            else len(self._orders) + 1 + self.seed * 10**7,
            "customer_id": f"c{self.rng.randint(1, 5000):05d}",
            "order_ts": self._clock - timedelta(seconds=self.rng.randint(0, 120)),
            "region": self.rng.choice(REGIONS),
            "total": round(self.rng.uniform(3, 900), self.rng.choice((0, 1, 2, 3))),
            "items": self.rng.randint(1, 9),
            "state": "placed",
        }
        self._orders.append(order)
        return order

    def _invalid(self, kind: str) -> bytes:
        if self._orders:
            order = self.rng.choice(self._orders)
        else:
            order = self._new_order()
        event = self._event(order, "placed")
        text = json.dumps(event).encode()
        whole_record = {
            "not_json": b"order placed: " + str(event["order_id"]).encode(),
            "truncated": text[:-7],
            "array": b"[" + text + b"]",
            "bad_utf8": text.replace(b'"region"', b'"r\xffgion"'),
        }
        if kind in whole_record:
            return whole_record[kind]
        changes: dict[str, object] = {
            "bool_customer": {"customer_id": True},
            "empty_region": {"region": ""},
            "unknown_type": {"event_type": "shipped"},
            "no_zone": {"event_ts": event["event_ts"][:19]},
            "impossible_date": {"order_ts": "2026-02-30T10:00:00Z"},
            "negative_total": {"total": -12.5},
            "sci_string_total": {"total": "1e3"},
            "float_items": {"items_count": 2.5},
        }
        drops = {"missing_order_id": "order_id", "missing_total": "total"}
        if kind in drops:
            event.pop(drops[kind], None)
        else:
            event.update(changes[kind])  # type: ignore[call-overload]
        return json.dumps(event).encode()

    def _lifecycle_events(self, n_new: int) -> Iterator[dict]:
        for _ in range(n_new):
            yield self._event(self._new_order(), "placed")
            # Existing orders move on: updates (new totals) and cancellations.
            if self._orders and self.rng.random() < 0.6:
                order = self.rng.choice(self._orders)
                if order["state"] != "cancelled":
                    if self.rng.random() < 0.75:
                        order["total"] = round(order["total"] * self.rng.uniform(0.5, 1.5), 2)
                        order["state"] = "updated"
                        yield self._event(order, "updated")
                    else:
                        order["state"] = "cancelled"
                        yield self._event(order, "cancelled")

    def batch(self, n_new_orders: int) -> list[bytes]:
        """Lines for one delivery: new orders, their follow-ups, late, repeated and broken
        records. Late records are held back and delivered with a later batch."""
        lines: list[bytes] = list(self._held_back)
        self._held_back = []
        for event in self._lifecycle_events(n_new_orders):
            line = json.dumps(event).encode()
            if self.rng.random() < self.late_ratio:
                self._held_back.append(line)
                continue
            lines.append(line)
            if self.rng.random() < self.duplicate_ratio:
                lines.append(line)
        n_invalid = round(len(lines) * self.invalid_ratio)
        for _ in range(n_invalid):
            # Rotate through every kind of bad input across batches.
            kind = INVALID_KINDS[self._invalid_seq % len(INVALID_KINDS)][0]
            self._invalid_seq += 1
            lines.append(self._invalid(kind))
        self.rng.shuffle(lines)
        return lines

    def flush_late(self) -> list[bytes]:
        """Deliver everything still held back."""
        lines, self._held_back = self._held_back, []
        return lines


def render_file(lines: list[bytes], rng: random.Random | None = None) -> bytes:
    """JSON Lines content: mixed ``\\n`` / ``\\r\\n`` endings, a few blank lines, and no
    newline after the last record (all allowed by the contract)."""
    rng = rng or random.Random(0)
    out = bytearray()
    for i, line in enumerate(lines):
        out += line
        if i < len(lines) - 1:
            out += b"\r\n" if rng.random() < 0.3 else b"\n"
            if rng.random() < 0.02:
                out += b"\n   \n"
    return bytes(out)


def landing_file_name(folder: str) -> str:
    """A new landing file's name: the folder's name, a time and a random part."""
    stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    return f"{folder.rstrip('/').rsplit('/', 1)[-1]}-{stamp}.jsonl"


def land_file(storage: Storage, folder: str, content: bytes, name: str | None = None) -> str:
    """Land a file whole under ``folder`` (a path or a URI under the root): on a disk it is
    written under a hidden name and renamed in, on an object store it is one object, which
    appears complete or not at all. Returns its location."""
    location = f"{folder.rstrip('/')}/{name or landing_file_name(folder)}"
    storage.write_bytes(location, content)
    return location


def write_landing_file(
    landing_dir: str | os.PathLike[str], content: bytes, name: str | None = None
) -> Path:
    """Write a landing file the safe way: to a hidden name, then rename it in. The default
    name is the folder's name, a time and a random part."""
    directory = Path(landing_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / (name or landing_file_name(str(directory)))
    staging = directory / f".{final.name}.tmp"
    staging.write_bytes(content)
    staging.replace(final)
    return final
