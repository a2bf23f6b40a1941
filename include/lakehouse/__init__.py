"""The light half of the project: settings, table and pipeline specs, the spark-submit builder.

Both sides import this package: the Airflow DAGs (which must stay cheap to parse) and the
Spark jobs (which must never import Airflow). Nothing here imports Spark or Airflow at
module level.
"""

from __future__ import annotations

__version__ = "0.1.0"
