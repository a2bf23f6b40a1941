"""Consistency guards: before a layer writes anything, its checkpoint and its tables must agree.

A Delta table records, for every streaming writer, the last micro-batch it committed (its
transaction version ``T`` for the writer's query id). The checkpoint records the batches it
planned (``O``) and committed (``C``). Runs after a damaged, missing or foreign checkpoint
would lose or duplicate data without any error from Spark or Delta, so each state is refused
here with a named error, within seconds and with nothing written:

* ``CheckpointBehindTable``: ``T > O``, the table holds a batch the checkpoint never planned;
* ``CheckpointMissing``: no checkpoint, but the table has data (bronze would append its whole
  source again; silver would quarantine everything twice);
* ``CheckpointForeign``: the checkpoint has committed batches but its query id is not among
  the writers of a table that has data.

``full_refresh`` of silver or gold is the way out of each: it overwrites the tables from
their source after the stream catches up, so what the stream does first cannot matter.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from jobs.delta_state import is_delta_table, table_state
from jobs.storage import HadoopStorage
from lakehouse.checkpoints import Checkpoint, txn_problem
from lakehouse.errors import CheckpointBehindTable, CheckpointForeign, CheckpointMissing
from lakehouse.params import Mode, RunParams
from lakehouse.settings import Settings
from lakehouse.specs import Layer, StreamSpec


def check_checkpoint(
    spark: SparkSession, settings: Settings, stream: StreamSpec, params: RunParams
) -> None:
    """Refuse to run when ``stream``'s checkpoint and tables disagree (see above)."""
    if params.mode == Mode.FULL_REFRESH and stream.layer != Layer.BRONZE:
        return
    log = Checkpoint(HadoopStorage(spark), settings.path(stream.checkpoint)).log()
    where = f"{stream.name} (checkpoint {stream.checkpoint})"
    for table in stream.targets:
        location = settings.path(table)
        if not is_delta_table(spark, location):
            continue
        state = table_state(spark, location)
        has_rows = state.file_count() > 0
        if log.query_id is None:
            if has_rows:
                raise CheckpointMissing(
                    f"{table} has data but the checkpoint of {where} is missing."
                )
            continue
        txn = state.txn_versions.get(log.query_id)
        problem = txn_problem(table, txn, log.last_commit, log.last_offsets)
        if problem:
            raise CheckpointBehindTable(f"{where}: {problem}.")
        if txn is None and has_rows and log.last_commit is not None and state.txn_versions:
            raise CheckpointForeign(
                f"{where}: query {log.query_id} has committed batches, but {table} was only "
                f"ever written by {len(state.txn_versions)} other writer(s)."
            )
