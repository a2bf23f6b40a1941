"""Segment sales: daily orders and revenue per customer segment, as of each order's time.

Joins two pipelines' silver tables: every order of ``silver/orders`` that is not cancelled
takes the segment of the ``silver/customers_history`` version of its customer that covers its
``order_ts`` (``unknown`` when none does). Runs when either table changes (Airflow assets),
and recomputes only the days those changes touch: an order's own days, or, for a customer's
changed versions, the days of that customer's orders within them.
"""

from __future__ import annotations

from lakehouse.specs import Gold, GoldInput, PipelineSpec

# An order and the version of its customer that covers the order's time.
AS_OF = (
    "c.customer_id = o.customer_id AND c.valid_from <= o.order_ts "
    "AND (c.valid_to IS NULL OR o.order_ts < c.valid_to)"
)

PIPELINE = PipelineSpec(
    name="segment_sales",
    description="Orders and revenue per day and customer segment, as of each order's time.",
    gold=Gold(
        table="gold/segment_sales_daily",
        description="Orders and revenue per UTC day of order_ts and customer segment.",
        schema="order_date DATE NOT NULL, segment STRING NOT NULL, orders BIGINT, "
        "revenue DECIMAL(18,2)",
        key=("order_date", "segment"),
        recompute_by=("order_date",),
        sql=f"""
            SELECT to_date(o.order_ts) AS order_date,
                   coalesce(c.segment, 'unknown') AS segment,
                   count(*) AS orders,
                   CAST(sum(o.total) AS DECIMAL(18,2)) AS revenue
            FROM {{orders}} o LEFT JOIN {{customers}} c ON {AS_OF}
            WHERE o.status <> 'cancelled'
            GROUP BY 1, 2
        """,
        inputs=(
            GoldInput(
                "orders",
                "silver/orders",
                touches="SELECT DISTINCT to_date(order_ts) AS order_date FROM {changes}",
            ),
            GoldInput(
                "customers",
                "silver/customers_history",
                touches=f"""
                    SELECT DISTINCT to_date(o.order_ts) AS order_date
                    FROM {{changes}} c JOIN {{orders}} o ON {AS_OF}
                """,
            ),
        ),
    ),
)
