"""The embedded default: everything one machine needs to run the project without a cluster.

``env`` (the shell and Airflow settings of a checkout), ``airflow_home`` (a project-local
Airflow with its database), ``services`` (a Spark standalone master and worker, a Kafka
broker, as local processes) and ``demo``.
"""
