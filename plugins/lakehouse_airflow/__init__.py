"""Airflow glue for the lakehouse jobs: the spark-submit operator and the table assets."""
