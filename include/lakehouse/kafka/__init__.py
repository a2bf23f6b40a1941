"""Kafka as a source, in three parts: how to reach the brokers (``access``), pure offset
arithmetic (``offsets``: what is lost, what a replay reads, what a checkpoint resumes from),
and the calls to the brokers (``brokers``: the pre-flight check, offsets by time).

confluent-kafka is imported inside the functions that call the brokers: the Airflow operator
imports this package and must stay cheap.
"""
