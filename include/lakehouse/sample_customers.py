"""Realistic customer change events (a CDC feed), with the trouble real feeds carry, for
the demo and the tests of the customers pipeline.

Customers are created, change segment, country, name or email, are upserted again
without change, deleted and sometimes created again; deletes also arrive for customers
that do not exist. Events of one customer sometimes share an ``updated_at`` (the tie is
broken by ``event_id``), arrive late (held back for a later batch), twice (sometimes
re-serialized with another key order, whitespace or escaping), and out of order. Ids are
strings or integers; ``test-`` accounts (dropped by the pipeline, some carrying an
unsupported schema_version to prove the drop comes first), upserts without an email or
with an empty one (warned), and about 5% invalid records, one of every kind in
``INVALID_KINDS`` in turn, are mixed in.

``updated_at`` spans ``start`` (2026-10-26) to 2026-11-06, with a share of changes in
the first hours after 2026-11-02T08:00, where ``OrderEventGenerator``'s orders begin,
so that changes split the versions orders fall in; customer ids are the ones that
generator draws (``c00001``..``c05000``), so its orders join them. Everything is
deterministic for a given seed. Plain Python only: the demo and DAG-side code import it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

HISTORY_START = datetime(2026, 10, 26, tzinfo=UTC)
HISTORY_END = datetime(2026, 11, 6, tzinfo=UTC)
ORDERS_START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # OrderEventGenerator's default start
# Test-sized order runs cover a few hours after ORDERS_START; changes land there often.
ORDERS_FOCUS = timedelta(hours=4)

SEGMENTS = ("consumer", "business", "vip")
COUNTRIES = ("DE", "BR", "US", "SE", "IN", "JP", "FR", "NG")
FIRST_NAMES = ("Ana", "Ben", "Chen", "Dara", "Émile", "Fatima", "Jürgen", "Kenji", "Zoë", "李")
LAST_NAMES = ("Silva", "Müller", "Tanaka", "Okafor", "Andersson", "O'Neil", "Nguyen", "王")
EMAIL_DOMAINS = ("example.com", "mail.example.org", "corp.example.net")
DEFAULT_CUSTOMERS = tuple(f"c{i:05d}" for i in range(1, 5001))  # as OrderEventGenerator
TEST_ACCOUNTS = tuple(f"test-{i:04d}" for i in range(1, 41))
# Customers whose id travels as a JSON integer or as its text: one customer either way.
NUMERIC_CUSTOMERS = tuple(str(9_000_000 + i) for i in range(1, 21))
UNSUPPORTED_SCHEMA_VERSIONS = (2, 0, -1, 3)
_OFFSETS = (timedelta(hours=-5), timedelta(hours=1), timedelta(hours=5, minutes=30))

# Each broken record names the first rule it breaks (the reason quarantine must give).
INVALID_KINDS: tuple[tuple[str, str], ...] = (
    ("not_json", "not_json"),
    ("truncated", "not_json"),
    ("bad_utf8", "invalid_utf8"),
    ("duplicate_key", "duplicate_key"),
    ("array", "not_object"),
    ("json_string", "not_object"),
    ("missing_event_id", "missing:event_id"),
    ("empty_event_id", "empty:event_id"),
    ("bool_event_id", "wrong_type:event_id"),
    ("null_customer_id", "missing:customer_id"),
    ("empty_customer_id", "empty:customer_id"),
    ("float_customer_id", "wrong_type:customer_id"),
    ("missing_op", "missing:op"),
    ("number_op", "wrong_type:op"),
    ("unknown_op", "not_allowed:op"),
    ("missing_updated_at", "missing:updated_at"),
    ("epoch_updated_at", "wrong_type:updated_at"),
    ("no_zone", "no_zone:updated_at"),
    ("space_updated_at", "bad_format:updated_at"),
    ("impossible_date", "impossible_date:updated_at"),
    ("missing_name", "missing:name"),
    ("null_name", "missing:name"),
    ("empty_name", "empty:name"),
    ("number_name", "wrong_type:name"),
    ("missing_segment", "missing:segment"),
    ("list_segment", "wrong_type:segment"),
    ("unknown_segment", "not_allowed:segment"),
    ("missing_country", "missing:country"),
    ("bool_country", "wrong_type:country"),
    ("lower_country", "bad_format:country"),
    ("long_country", "bad_format:country"),
    ("number_email", "wrong_type:email"),
    ("delete_object_email", "wrong_type:email"),
    ("string_schema_version", "wrong_type:schema_version"),
    ("float_schema_version", "wrong_type:schema_version"),
    ("bool_schema_version", "wrong_type:schema_version"),
    ("huge_schema_version", "out_of_range:schema_version"),
    ("test_account_no_segment", "missing:segment"),  # invalid goes before the drop
    ("unknown_op_no_name", "not_allowed:op"),  # an op that is not delete keeps name required
    ("missing_op_lower_country", "missing:op"),
)
# The kinds that break more than one rule: every reason, in the contract's field order.
MULTI_REASON_KINDS: dict[str, tuple[str, ...]] = {
    "unknown_op_no_name": ("not_allowed:op", "missing:name"),
    "missing_op_lower_country": ("missing:op", "bad_format:country"),
}

# Field changes applied to a well-formed upsert to break exactly one rule (or the rules
# MULTI_REASON_KINDS lists); None removes the field.
_FIELD_BREAKS: dict[str, dict[str, Any]] = {
    "missing_event_id": {"event_id": None},
    "empty_event_id": {"event_id": ""},
    "bool_event_id": {"event_id": True},
    "empty_customer_id": {"customer_id": ""},
    "float_customer_id": {"customer_id": 12.5},
    "missing_op": {"op": None},
    "number_op": {"op": 1},
    "unknown_op": {"op": "UPSERT"},
    "missing_updated_at": {"updated_at": None},
    "epoch_updated_at": {"updated_at": 1793606400},
    "impossible_date": {"updated_at": "2026-11-31T10:00:00Z"},
    "missing_name": {"name": None},
    "empty_name": {"name": ""},
    "number_name": {"name": 42},
    "missing_segment": {"segment": None},
    "list_segment": {"segment": ["vip"]},
    "unknown_segment": {"segment": "VIP"},
    "missing_country": {"country": None},
    "bool_country": {"country": False},
    "lower_country": {"country": "de"},
    "long_country": {"country": "DEU"},
    "number_email": {"email": 123},
    "delete_object_email": {"op": "delete", "email": {"address": "a@example.com"}},
    "string_schema_version": {"schema_version": "1"},
    "float_schema_version": {"schema_version": 1.0},
    "bool_schema_version": {"schema_version": True},
    "huge_schema_version": {"schema_version": 2**63},
    "test_account_no_segment": {"customer_id": "test-0001", "segment": None},
    "unknown_op_no_name": {"op": "merge", "name": None},
    "missing_op_lower_country": {"op": None, "country": "br"},
}


def render_instant(at: datetime, rng: random.Random) -> str:
    """ISO-8601 text for exactly the instant ``at`` (no precision lost, so the generator's
    own ordering of a customer's events is the one the pipeline must find), in a zone
    that varies: ``Z``, ``+00:00`` or a local offset."""
    style = rng.random()
    offset = timedelta(0) if style < 0.7 else rng.choice(_OFFSETS)
    local = at.astimezone(UTC) + offset
    text = local.strftime("%Y-%m-%dT%H:%M:%S")
    if local.microsecond:
        fraction = f"{local.microsecond:06d}"
        text += "." + (fraction[:3] if fraction.endswith("000") else fraction)
    if style < 0.55:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def message_key(line: bytes | None) -> bytes | None:
    """The Kafka key of a record: its customer id as text, so one customer's changes stay
    in one partition; None when the record has no usable customer id (broken records)."""
    if line is None:
        return None
    try:
        document = json.loads(line)
        customer_id = document["customer_id"]
        if isinstance(customer_id, bool) or not isinstance(customer_id, str | int):
            return None
        text = str(customer_id)
    except (ValueError, KeyError, TypeError):
        return None
    return text.encode() if text else None


@dataclass
class _Customer:
    customer_id: str
    numeric: bool = False
    state: dict[str, Any] | None = None  # name, email (None = absent), segment, country
    last_state: dict[str, Any] | None = None  # the latest state, kept across a delete
    clock: datetime | None = None  # updated_at of its latest event, in true order
    touched: bool = False  # picked at least once: a candidate for further changes


@dataclass
class CustomerEventGenerator:
    """Deterministic stream of customer change events. Call ``batch`` repeatedly for new
    deliveries and ``flush_late`` for what is still held back."""

    seed: int = 11
    start: datetime = HISTORY_START
    customer_ids: Sequence[str] | None = None
    end: datetime = HISTORY_END
    orders_start: datetime = ORDERS_START
    invalid_ratio: float = 0.05
    late_ratio: float = 0.06
    duplicate_ratio: float = 0.04
    redelivery_ratio: float = 0.02  # an event of an earlier batch delivered again
    tie_ratio: float = 0.05  # a second event of the customer at the same updated_at
    rng: random.Random = field(init=False)
    _pool: list[str] = field(init=False)
    _customers: dict[str, _Customer] = field(init=False, default_factory=dict)
    _touched: list[_Customer] = field(init=False, default_factory=list)
    _event_seq: int = field(init=False, default=0)
    _invalid_seq: int = field(init=False, default=0)
    _unsupported_seq: int = field(init=False, default=0)
    _held_back: list[tuple[bytes, dict[str, Any]]] = field(init=False, default_factory=list)
    _delivered: list[dict[str, Any]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._pool = list(self.customer_ids or DEFAULT_CUSTOMERS)
        for customer_id in TEST_ACCOUNTS:
            self._customers[customer_id] = _Customer(customer_id)
        for customer_id in NUMERIC_CUSTOMERS:
            self._customers[customer_id] = _Customer(customer_id, numeric=True)

    # -- the model: customers and their true timeline -------------------------------

    def _customer(self, customer_id: str) -> _Customer:
        customer = self._customers.get(customer_id)
        if customer is None:
            customer = self._customers[customer_id] = _Customer(customer_id)
        return customer

    def _pick(self) -> _Customer:
        """Mostly customers of the pool, often ones seen before (so some get many
        versions), a few test accounts and integer-id customers."""
        roll = self.rng.random()
        if roll < 0.03:
            customer = self._customers[self.rng.choice(TEST_ACCOUNTS)]
        elif roll < 0.05:
            customer = self._customers[self.rng.choice(NUMERIC_CUSTOMERS)]
        elif roll < 0.5 and self._touched:
            customer = self.rng.choice(self._touched)
        else:
            customer = self._customer(self.rng.choice(self._pool))
        if not customer.touched:
            customer.touched = True
            self._touched.append(customer)
        return customer

    def _next_at(self, clock: datetime | None) -> datetime:
        """A customer's next updated_at, strictly after its previous one."""
        rng = self.rng
        focus_end = self.orders_start + ORDERS_FOCUS
        if clock is None:
            roll = rng.random()
            low, high = (
                (self.start, self.orders_start)
                if roll < 0.65
                else (self.orders_start, focus_end)
                if roll < 0.85
                else (self.orders_start, self.end)
            )
            at = low + (high - low) * rng.random()
        elif clock < focus_end and rng.random() < 0.3:
            low = max(clock, self.orders_start)
            at = low + (focus_end - low) * rng.random()
        else:
            # Anywhere up to the end, or (more often) soon: later days get changes too.
            share = rng.random() if rng.random() < 0.4 else rng.random() / 3
            at = clock + max(self.end - clock, timedelta(0)) * share
        at = at.replace(microsecond=0)
        if rng.random() < 0.2:
            at += timedelta(milliseconds=rng.randint(1, 999))
        if clock is not None and at <= clock:
            at = clock + timedelta(seconds=rng.randint(1, 60))
        return at

    def _fresh_state(self) -> dict[str, Any]:
        rng = self.rng
        return {
            "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
            "email": self._fresh_email(),
            "segment": rng.choice(SEGMENTS),
            "country": rng.choice(COUNTRIES),
        }

    def _fresh_email(self) -> str | None:
        roll = self.rng.random()
        if roll < 0.12:
            return None  # no email: warned
        if roll < 0.22:
            return ""  # an empty email: warned too, and not the same value as none
        return f"user{self.rng.randint(1, 99999)}@{self.rng.choice(EMAIL_DOMAINS)}"

    def _changed_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The state with one field changed (sometimes two)."""
        rng = self.rng
        new = dict(state)
        for _ in range(1 if rng.random() < 0.85 else 2):
            roll = rng.random()
            if roll < 0.4:
                new["segment"] = rng.choice([s for s in SEGMENTS if s != new["segment"]])
            elif roll < 0.6:
                new["country"] = rng.choice([c for c in COUNTRIES if c != new["country"]])
            elif roll < 0.75:
                new["name"] = new["name"] + " " + rng.choice(LAST_NAMES)
            else:
                emails = [self._fresh_email() for _ in range(3)]
                new["email"] = next((e for e in emails if e != new["email"]), "x@example.com")
        return new

    # -- events --------------------------------------------------------------------------

    def _new_event_id(self, allow_integer: bool = True) -> str | int:
        self._event_seq += 1
        if allow_integer and self.rng.random() < 0.1:
            return self.seed * 10**9 + self._event_seq  # integer ids are valid
        return f"u{self.seed}-{self._event_seq:08d}"

    def _event(
        self,
        customer: _Customer,
        op: str,
        at: datetime,
        state: dict[str, Any] | None,
        allow_integer: bool = True,
    ) -> dict[str, Any]:
        rng = self.rng
        customer_id: str | int = customer.customer_id
        if customer.numeric and rng.random() < 0.5:
            customer_id = int(customer.customer_id)
        event: dict[str, Any] = {
            "event_id": self._new_event_id(allow_integer),
            "customer_id": customer_id,
            "op": op,
            "updated_at": render_instant(at, rng),
        }
        if op == "upsert":
            assert state is not None
            event.update(name=state["name"], segment=state["segment"], country=state["country"])
            if state["email"] is not None:
                event["email"] = state["email"]
            elif rng.random() < 0.3:
                event["email"] = None  # a null is an absent email
        else:
            self._delete_extras(event, customer)
        roll = rng.random()
        if customer.customer_id.startswith("test-") and roll < 0.25:
            # Dropped before the schema check: these must not fail a run.
            event["schema_version"] = rng.choice(UNSUPPORTED_SCHEMA_VERSIONS)
        elif roll < 0.25:
            event["schema_version"] = 1
        elif roll < 0.3:
            event["schema_version"] = None
        if rng.random() < 0.05:
            event["source"] = {"system": "crm", "tags": ["sync", 1]}  # unknown fields
        return event

    def _delete_extras(self, event: dict[str, Any], customer: _Customer) -> None:
        """A delete may carry the upsert fields, even broken ones: they are ignored."""
        roll = self.rng.random()
        last = customer.last_state
        if roll < 0.25 and last is not None:
            event.update({k: v for k, v in last.items() if v is not None})
        elif roll < 0.35:
            event.update(name=0, segment="gold", country="xx")

    def _apply(self, customer: _Customer, op: str, at: datetime, state: dict | None) -> None:
        customer.clock = at
        customer.state = state if op == "upsert" else None
        if state is not None:
            customer.last_state = state

    def _change(self, customer: _Customer) -> Iterator[dict[str, Any]]:
        """One change of ``customer`` (sometimes followed by a second one at the same
        updated_at), applied to the model in the order the contract sorts them."""
        rng = self.rng
        at = self._next_at(customer.clock)
        op, state = self._next_op(customer)
        first = self._event(customer, op, at, state)
        self._apply(customer, op, at, state)
        yield first
        if rng.random() < self.tie_ratio:
            # The same updated_at: string ids from one counter sort after the first event's
            # id (an integer id's digits sort before "u"), so the model's order is the true one.
            op, state = self._next_op(customer)
            yield self._event(customer, op, at, state, allow_integer=False)
            self._apply(customer, op, at, state)

    def _next_op(self, customer: _Customer) -> tuple[str, dict[str, Any] | None]:
        roll = self.rng.random()
        if customer.state is None:
            if roll < 0.08:
                return "delete", None  # a delete of a customer that is not there
            last = customer.last_state
            if last is not None and roll < 0.3:
                return "upsert", dict(last)  # re-created as it was
            return "upsert", self._fresh_state()
        if roll < 0.15:
            return "upsert", dict(customer.state)  # an upsert that changes nothing
        if roll < 0.27:
            return "delete", None
        return "upsert", self._changed_state(customer.state)

    def _changes(self, n_changes: int) -> Iterator[dict[str, Any]]:
        for _ in range(n_changes):
            yield from self._change(self._pick())

    # -- serialization -------------------------------------------------------------------

    def _dump(self, event: dict[str, Any]) -> bytes:
        return json.dumps(event, ensure_ascii=self.rng.random() < 0.7).encode()

    def _redump(self, event: dict[str, Any]) -> bytes:
        """The same event in other bytes: key order, whitespace and escaping vary."""
        rng = self.rng
        items = list(event.items())
        rng.shuffle(items)
        separators = rng.choice(((",", ":"), (", ", ": "), (" ,  ", " :\t")))
        text = json.dumps(dict(items), separators=separators, ensure_ascii=rng.random() < 0.5)
        if rng.random() < 0.3:
            text = " " + text + " "
        return text.encode()

    # -- broken and failing records ----------------------------------------------------

    def invalid(self, kind: str) -> bytes:
        """One record of ``kind`` (a name in ``INVALID_KINDS``); it changes no customer."""
        rng = self.rng
        customer = self._customer(rng.choice(self._pool))
        at = self.start + (self.end - self.start) * rng.random()
        state = self._fresh_state()
        event = self._event(customer, "upsert", at.replace(microsecond=0), state, False)
        event.pop("schema_version", None)
        event.pop("email", None)
        text = json.dumps(event).encode()
        whole_record = {
            "not_json": b"customer " + customer.customer_id.encode() + b" changed",
            "truncated": text[:-6],
            "bad_utf8": text.replace(b'"name"', b'"n\xffme"'),
            "duplicate_key": text[:-1] + b', "op": "upsert"}',
            "array": b"[" + text + b"]",
            "json_string": json.dumps(text.decode()).encode(),
        }
        if kind in whole_record:
            return whole_record[kind]
        if kind == "null_customer_id":
            event["customer_id"] = None  # a null counts as absent
        elif kind == "null_name":
            event["name"] = None
        elif kind == "no_zone":
            event["updated_at"] = at.strftime("%Y-%m-%dT%H:%M:%S")
        elif kind == "space_updated_at":
            event["updated_at"] = at.strftime("%Y-%m-%d %H:%M:%SZ")
        else:
            for name, value in _FIELD_BREAKS[kind].items():
                if value is None:
                    event.pop(name, None)
                else:
                    event[name] = value
        return json.dumps(event).encode()

    def unsupported(self) -> bytes:
        """A valid upsert of a real customer with a schema_version other than 1: it must
        fail the run. Not part of the model, never held back or delivered again."""
        customer = self._customer(self.rng.choice(self._pool))
        at = self._next_at(customer.clock)
        event = self._event(customer, "upsert", at, customer.state or self._fresh_state())
        version = UNSUPPORTED_SCHEMA_VERSIONS[
            self._unsupported_seq % len(UNSUPPORTED_SCHEMA_VERSIONS)
        ]
        self._unsupported_seq += 1
        event["schema_version"] = version
        return self._dump(event)

    # -- deliveries --------------------------------------------------------------------

    def batch(self, n_changes: int, unsupported_schema_version: int = 0) -> list[bytes]:
        """Records for one delivery: ``n_changes`` changes (plus same-instant follow-ups),
        late ones from earlier batches, repeats, broken records, and
        ``unsupported_schema_version`` valid records that must fail the run (none by
        default). Late records are held back for a later batch or ``flush_late``."""
        rng = self.rng
        lines: list[bytes] = []
        still_late: list[tuple[bytes, dict[str, Any]]] = []
        for line, event in self._held_back:
            if rng.random() < 0.7:
                lines.append(line)
                self._delivered.append(event)
            else:
                still_late.append((line, event))  # later still
        self._held_back = still_late
        for event in self._changes(n_changes):
            line = self._dump(event)
            if rng.random() < self.late_ratio:
                self._held_back.append((line, event))
                continue
            lines.append(line)
            if rng.random() < self.duplicate_ratio:
                lines.append(line if rng.random() < 0.5 else self._redump(event))
            if self._delivered and rng.random() < self.redelivery_ratio:
                lines.append(self._redump(rng.choice(self._delivered)))
            self._delivered.append(event)
        for _ in range(round(len(lines) * self.invalid_ratio)):
            # Rotate through every kind of bad input across batches.
            kind = INVALID_KINDS[self._invalid_seq % len(INVALID_KINDS)][0]
            self._invalid_seq += 1
            lines.append(self.invalid(kind))
        lines.extend(self.unsupported() for _ in range(unsupported_schema_version))
        rng.shuffle(lines)
        return lines

    def initial_load(self, n_customers: int | None = None) -> list[bytes]:
        """First-time upserts, before the orders begin, for ``n_customers`` customers of the
        pool not created yet (all of them by default), clean and shuffled: with it most
        orders find a version, and later batches' changes split those versions. Orders
        draw customers from 5000 ids, so ``batch`` alone leaves most of them unknown."""
        rng = self.rng
        fresh = [c for c in self._pool if self._customer(c).clock is None]
        chosen = fresh if n_customers is None else rng.sample(fresh, min(n_customers, len(fresh)))
        lines = []
        for customer_id in chosen:
            customer = self._customer(customer_id)
            if not customer.touched:
                customer.touched = True
                self._touched.append(customer)
            at = self.start + (self.orders_start - self.start) * rng.random()
            at = at.replace(microsecond=0)
            state = self._fresh_state()
            event = self._event(customer, "upsert", at, state)
            self._apply(customer, "upsert", at, state)
            self._delivered.append(event)
            lines.append(self._dump(event))
        rng.shuffle(lines)
        return lines

    def flush_late(self) -> list[bytes]:
        """Deliver everything still held back."""
        late, self._held_back = self._held_back, []
        self._delivered.extend(event for _, event in late)
        return [line for line, _ in late]
