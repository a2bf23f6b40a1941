"""Spark applications, one per layer, each runnable by ``spark-submit jobs/<layer>.py``.

Nothing here imports Airflow. Shared pieces: ``session`` (the one session factory),
``runtime`` (arguments, the availableNow run, progress, run log), ``validation`` and
``transforms`` (pure DataFrame functions), ``delta_writes`` (idempotent writes).
"""
