"""Named errors: every condition we refuse to run under has a class and says what to do next.

A job's ``main`` turns a ``LakehouseError`` into exit code 2 and one readable line
(``ERROR [ClassName] message``) instead of a stack trace, so the Airflow task log ends
with the cause and the fix. ``retryable`` says whether a later attempt can succeed without
anybody changing anything (a busy lock, a broker that is down); the Airflow operator fails a
task at once for the others instead of retrying it.
"""

from __future__ import annotations

from typing import ClassVar


class LakehouseError(Exception):
    """Base class. ``hint`` tells the operator what to do next."""

    hint: str = ""
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def code(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message} What to do: {self.hint}" if self.hint else message


def error_class(code: str) -> type[LakehouseError] | None:
    """The named error whose ``code`` (class name) this is, if any."""
    pending: list[type[LakehouseError]] = [LakehouseError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == code:
            return cls
        pending.extend(cls.__subclasses__())
    return None


def is_retryable(code: str | None) -> bool:
    """Whether a failure with this code may succeed on a retry. Anything that is not a named
    error (a crash, a lost executor) is retried: the jobs are idempotent."""
    cls = error_class(code) if code else None
    return cls is None or cls.retryable


class ConfigurationError(LakehouseError):
    """A setting or parameter is invalid."""

    hint = "Fix the setting named above (see README, 'Configuration') and run again."


class DeclarationError(ConfigurationError):
    """A pipeline declaration that cannot work; the message names the file and the field."""

    hint = (
        "Fix the declaration named above (see README, 'Add a pipeline'); the other pipelines "
        "load and run without it."
    )


class ExpectationFailed(LakehouseError):
    """A ``fail`` expectation was broken: the micro-batch was not committed."""

    hint = (
        "Nothing of the micro-batch was written. Fix the records at the source, or change the "
        "expectation in the pipeline's declaration (its action, or its condition); the next "
        "run processes the same micro-batch under the declaration as it is then."
    )


class JavaNotFound(LakehouseError):
    hint = (
        "Install a Java 17 or 21 runtime (Debian: apt-get install openjdk-17-jre-headless) "
        "or point JAVA_HOME at one, then run again."
    )


class JarsMissing(LakehouseError):
    hint = "Run `make setup` to resolve the Delta and Kafka jars into the local jar cache."


class LakehouseRootNotWritable(LakehouseError):
    hint = (
        "Point LAKEHOUSE_ROOT at a folder this user can write, or fix its permissions; on S3, "
        "check the bucket, AWS_ENDPOINT_URL and the credentials (the lakehouse_s3 connection "
        "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)."
    )


class SparkMasterUnreachable(LakehouseError):
    retryable = True
    hint = (
        "Start the local standalone cluster with `make spark-up`, or set LAKEHOUSE_SPARK_MASTER "
        "to a master that answers (unset it to run on local Spark)."
    )


class InvalidRunParams(LakehouseError):
    hint = "Fix the parameters named above and trigger the run again; nothing was changed."


class SourceUnavailable(LakehouseError):
    retryable = True
    hint = "Check that the source (Kafka broker or landing folder) is reachable and run again."


class CheckpointInconsistent(LakehouseError):
    hint = (
        "The checkpoint and its table disagree; restoring it from a backup is described in the "
        "README, 'Maintenance'. Do not delete the checkpoint by hand."
    )


class CheckpointBehindTable(CheckpointInconsistent):
    """The table holds a micro-batch its writer's checkpoint never planned (``T > O``): the
    checkpoint lost entries (a partial copy, a hand restore), and a run would re-plan batches
    the table skips as done, losing their data."""

    hint = (
        "Nothing was written. Restore the layer from a checkpoint backup (`lakehouse restore "
        "<pipeline> <layer>`, or the lakehouse_restore DAG), which puts checkpoint and tables "
        "back together; for silver or gold, mode=full_refresh rebuilds them instead."
    )


class CheckpointMissing(CheckpointInconsistent):
    """A table has data but the checkpoint of the stream that writes it is gone: a new
    checkpoint would read its whole source again (bronze would append everything twice)."""

    hint = (
        "Nothing was written. Restore the checkpoint from a backup (`lakehouse restore "
        "<pipeline> <layer>`); for silver or gold, a run with mode=full_refresh rebuilds the "
        "tables from their source and starts a new checkpoint. Never delete a checkpoint."
    )


class CheckpointForeign(CheckpointInconsistent):
    """The checkpoint's query id is not among the writers the table has seen: it was copied
    from another root or put back by hand."""

    hint = (
        "Nothing was written. Put the right checkpoint back (restore from this root's backups "
        "with `lakehouse restore`), or rebuild silver or gold with mode=full_refresh."
    )


class RetentionBelowFloor(LakehouseError):
    hint = (
        "Ask for a retention at or above the floor. The floor (LAKEHOUSE_VACUUM_FLOOR_HOURS) "
        "protects readers and writers that VACUUM cannot see."
    )


class RestoreInProgress(LakehouseError):
    hint = (
        "A checkpoint restore started and has not finished: run the same restore again "
        "(`lakehouse restore ...`, or the lakehouse_restore DAG) to complete it."
    )


class ConcurrentRun(LakehouseError):
    retryable = True
    hint = (
        "Another job holds the write lease of this table. Wait for it to finish: it lets go "
        "when it ends; if it died, its lease is free again once its process is gone (same "
        "machine) or after LAKEHOUSE_LOCK_LEASE_S without a heartbeat (any machine)."
    )


class LeaseLost(ConcurrentRun):
    """This job's write lease ran out or was taken over: it must not commit any more."""

    hint = (
        "The job was paused, or cut off from the storage, for longer than its lease "
        "(LAKEHOUSE_LOCK_LEASE_S), and another writer may have taken the table over; nothing "
        "more was committed. A retry waits for that writer and resumes from the checkpoint."
    )


class DriverLost(LakehouseError):
    """The pipeline run's shared Spark driver (``jobs/driver.py``) went away during a job."""

    retryable = True
    hint = (
        "The driver was killed or its JVM died (its output is above). What the job had "
        "committed stays; the task's retry starts a new driver and resumes from the checkpoint."
    )


class KafkaTopicNotFound(LakehouseError):
    hint = (
        "Create the topic, or fix the pipeline's topics (LAKEHOUSE_<PIPELINE>_KAFKA_TOPICS, or "
        "its declaration); nothing was read."
    )


class KafkaOffsetsLost(LakehouseError):
    """Records the checkpoint has not read yet are no longer on the brokers (data loss)."""

    hint = (
        "Nothing was written. Have the producers re-send the missing records if they can; "
        "then, to go on without the records that are gone, trigger one run with the param "
        "accept_data_loss=true (bronze -> spark-submit --accept-data-loss): it reads from the "
        "earliest offsets still there and records the lost ranges in ops/run_log. Never delete "
        "the checkpoint to get past this."
    )


class KafkaReplayUnavailable(LakehouseError):
    """A Kafka replay asked for records the brokers may no longer hold."""

    hint = (
        "Nothing was written. Start the replay later (at or after the timestamp the message "
        "gives), or have the producers re-send the records of that range."
    )


class KafkaAuthenticationFailed(LakehouseError):
    hint = (
        "Fix the login, password or sasl_mechanism of the Airflow connection lakehouse_kafka "
        "(see README, 'Kafka') and run again."
    )


class GoNotFound(LakehouseError):
    hint = (
        "Install Go 1.26+ (https://go.dev/dl, or Debian's golang package) or put it on PATH "
        "(GO=/path/to/go), then run again; it is needed once to build the local S3 server."
    )


class S3Error(LakehouseError):
    """An S3 request got an answer it should not have (the message names the S3 error code)."""

    hint = "See the S3 error code above; the request was not retried."


class S3Unavailable(S3Error):
    """Nothing answers at the S3 endpoint, or it answers with a server error."""

    hint = (
        "Start the local S3 server with `make s3-up` and load its settings with "
        '`eval "$(make -s env)"`, or point AWS_ENDPOINT_URL at an S3 endpoint that answers.'
    )


class S3AccessDenied(S3Error):
    """The S3 endpoint refused the request's credentials or its signature."""

    hint = (
        "Check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (for the local server: "
        '`eval "$(make -s env)"` sets them from .services/s3/credentials.json).'
    )


class NotAuthorized(LakehouseError):
    """A run asks for something only a permitted user may ask for (a restore, data loss)."""

    hint = (
        "Trigger the run from the Airflow UI or REST API as a user whom Airflow's auth manager "
        "allows it: with the simple auth manager the roles op and admin (README, 'Who may do "
        "what'). Nothing was changed."
    )
