"""Customers: change events (upserts and deletes) into the history of every customer.

Holds ``../shared/contract-customers.md``: JSON Lines in ``landing/customers/`` or the Kafka
topic ``customers.cdc`` into ``bronze/customers_events``; validated into
``silver/customers_history`` (SCD type 2: one row per version, ``valid_from``..``valid_to``)
and ``silver/customers_quarantine``. Three expectations beyond the record's rules: a missing
email is counted, test accounts are dropped, and an unknown schema version stops the run.
"""

from __future__ import annotations

from lakehouse.specs import (
    Expectation,
    FieldSpec,
    History,
    PipelineSpec,
    RecordSpec,
    Source,
)

# Only an upsert carries a customer's data; a delete's other fields are not looked at.
FOR_UPSERTS = ("op", ("delete",))

PIPELINE = PipelineSpec(
    name="customers",
    description="Customer change events into the history of each customer (SCD type 2).",
    source=Source(
        landing="landing/customers",
        bronze="bronze/customers_events",
        kafka_topics=("customers.cdc",),
    ),
    record=RecordSpec(
        fields=(
            FieldSpec("event_id", "id"),
            FieldSpec("customer_id", "id"),
            FieldSpec("op", "enum", allowed=("upsert", "delete")),
            FieldSpec("updated_at", "timestamp"),
            FieldSpec("name", "text", ignored_when=FOR_UPSERTS),
            FieldSpec(
                "segment", "enum", allowed=("consumer", "business", "vip"), ignored_when=FOR_UPSERTS
            ),
            FieldSpec("country", "string", pattern="[A-Z]{2}", ignored_when=FOR_UPSERTS),
            FieldSpec("email", "string", required=False),
            FieldSpec("schema_version", "integer", required=False),
        ),
        key="customer_id",
        time="updated_at",
    ),
    expectations=(
        Expectation("email_missing", "op = 'upsert' AND (email IS NULL OR email = '')", "warn"),
        Expectation("test_account", "startswith(customer_id, 'test-')", "drop"),
        Expectation(
            "unsupported_schema_version",
            "schema_version IS NOT NULL AND schema_version <> 1",
            "fail",
        ),
    ),
    silver=History(
        table="silver/customers_history",
        quarantine="silver/customers_quarantine",
        changes="silver/customers_changes",
        op="op",
        tracked=("name", "email", "segment", "country"),
    ),
    schedule="0 */3 * * *",
)
