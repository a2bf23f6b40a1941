"""A minimal S3 client on the standard library: signed (SigV4) object requests, path-style.

Why not pyarrow's or delta-rs's object store: neither can send ``If-None-Match: *`` on a PUT,
and that conditional create is what a lock on S3 is built on (the first writer creates the
key, every later one gets ``412 Precondition Failed``). The client also creates the local
server's bucket and lets the tests prove what the server refuses. It knows a handful of
requests and nothing else: no retries, no multipart uploads, objects in memory.

Credentials come from the file the Airflow operator hands a job (``LAKEHOUSE_S3_ACCESS_FILE``,
made from the ``lakehouse_s3`` connection) or else from the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``); the endpoint and
region from the settings (``AWS_ENDPOINT_URL``, ``AWS_REGION``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from lakehouse.errors import ConfigurationError, S3AccessDenied, S3Error, S3Unavailable
from lakehouse.settings import Settings

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_XMLNS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
S3_SCHEMES = ("s3a", "s3", "s3n")
# Where the Airflow operator leaves the credentials of the ``lakehouse_s3`` connection for a
# job: a file only its user can read (the path travels in the environment, never a secret).
ACCESS_FILE_ENV = "LAKEHOUSE_S3_ACCESS_FILE"
_CREDENTIAL_FIELDS = ("access_key_id", "secret_access_key", "session_token")


def is_s3_uri(location: str) -> bool:
    return location.split("://", 1)[0].lower() in S3_SCHEMES if "://" in location else False


def split_uri(location: str) -> tuple[str, str]:
    """``s3a://bucket/some/key`` -> ``("bucket", "some/key")`` (any S3 scheme)."""
    if not is_s3_uri(location):
        raise ConfigurationError(f"{location} is not an S3 URI (s3a://bucket/key).")
    bucket, _, key = location.split("://", 1)[1].partition("/")
    return bucket, key.strip("/")


@dataclass(frozen=True)
class S3Config:
    """Where S3 is and who asks; the secrets stay out of ``repr``."""

    endpoint: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Config:
        """Endpoint and region as the settings read them; credentials from the operator's
        access file (``LAKEHOUSE_S3_ACCESS_FILE``) if there is one, else from ``AWS_*``.

        Raises
        ------
        ConfigurationError
            When a credential variable is unset (naming it), or the access file cannot be read.
        """
        env = os.environ if env is None else env
        settings = Settings.from_env(env)
        endpoint = settings.s3_endpoint or f"https://s3.{settings.s3_region}.amazonaws.com"
        path = env.get(ACCESS_FILE_ENV, "").strip()
        if path:
            credentials = read_access_file(path)
            return cls(
                endpoint,
                credentials["access_key_id"],
                credentials["secret_access_key"],
                settings.s3_region,
                credentials.get("session_token"),
            )
        missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not env.get(k)]
        if missing:
            raise ConfigurationError(
                f"{' and '.join(missing)} not set: S3 requests are signed with them.",
                'For the local S3 server run `make s3-up` and `eval "$(make -s env)"`; under '
                "Airflow, add the connection lakehouse_s3 (README, 'Going to a cluster').",
            )
        return cls(
            endpoint,
            env["AWS_ACCESS_KEY_ID"],
            env["AWS_SECRET_ACCESS_KEY"],
            settings.s3_region,
            env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        """What must never be shown (for log masking)."""
        return tuple(s for s in (self.secret_access_key, self.session_token) if s)

    def storage_options(self) -> dict[str, str]:
        """The same access as delta-rs / object_store ``storage_options`` (path-style)."""
        options = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_ALLOW_HTTP": str(self.endpoint.startswith("http://")).lower(),
        }
        if self.session_token:
            options["AWS_SESSION_TOKEN"] = self.session_token
        return options

    def hadoop_credentials(self) -> dict[str, str]:
        """S3A's credential properties, for a job that got them from an access file (set on
        the running JVM's Hadoop configuration, never in the Spark configuration)."""
        kind = "Temporary" if self.session_token else "Simple"
        provider = f"org.apache.hadoop.fs.s3a.{kind}AWSCredentialsProvider"
        conf = {
            "fs.s3a.access.key": self.access_key_id,
            "fs.s3a.secret.key": self.secret_access_key,
            "fs.s3a.aws.credentials.provider": provider,
        }
        if self.session_token:
            conf["fs.s3a.session.token"] = self.session_token
        return conf

    def write_access_file(self, path: Path) -> Path:
        """Write the credentials to ``path``, created new and readable by its owner only."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({name: getattr(self, name) for name in _CREDENTIAL_FIELDS}, handle)
        return path


def read_access_file(path: str) -> dict[str, Any]:
    """The credentials in an access file written by ``S3Config.write_access_file``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not data.get("access_key_id") or not data.get("secret_access_key"):
            raise ValueError("no credentials")
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"{ACCESS_FILE_ENV}={path} cannot be read: {type(exc).__name__}."
        ) from None
    return {name: data.get(name) for name in _CREDENTIAL_FIELDS}


@dataclass(frozen=True)
class S3Object:
    """One key of a listing and when the server last wrote it (the server's clock)."""

    key: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class S3Response:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def server_time(self) -> datetime | None:
        """The server's clock when it answered (its ``Date`` header)."""
        value = self.header("Date")
        try:
            return parsedate_to_datetime(value).astimezone(UTC) if value else None
        except (TypeError, ValueError):
            return None

    @property
    def error_code(self) -> str:
        """The ``<Code>`` of an S3 error document ('' when there is none)."""
        try:
            return ET.fromstring(self.body).findtext("Code") or ""
        except ET.ParseError:
            return ""


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _encode(text: str, safe: str = "-_.~") -> str:
    return quote(text, safe=safe)


def sign(
    config: S3Config,
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload_sha256: str,
    now: datetime | None = None,
) -> dict[str, str]:
    """The headers that sign one request with AWS Signature Version 4 (service ``s3``).

    ``url`` must already be in canonical form (path segments and query URI-encoded, query
    keys sorted), as ``S3Client`` builds it; every header in ``headers`` is signed.
    """
    now = now or datetime.now(UTC)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    parts = urlsplit(url)
    signed = {
        **{k.lower(): str(v).strip() for k, v in headers.items()},
        "host": parts.netloc,
        "x-amz-content-sha256": payload_sha256,
        "x-amz-date": amz_date,
    }
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            parts.query,
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = f"{day}/{config.region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(f"AWS4{config.secret_access_key}".encode(), day)
    for part in (config.region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={config.access_key_id}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return signed


class S3Client:
    """Requests on one bucket, path-style (``<endpoint>/<bucket>/<key>``).

    Parameters
    ----------
    config
        Endpoint, region and credentials.
    bucket
        The bucket every call works in.
    timeout_s
        Socket timeout of one request.
    """

    def __init__(self, config: S3Config, bucket: str, *, timeout_s: float = 10.0) -> None:
        self.config = config
        self.bucket = bucket
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"S3Client({self.config.endpoint}, bucket={self.bucket!r})"

    def url(self, key: str = "", query: Mapping[str, str] | None = None) -> str:
        path = f"/{_encode(self.bucket)}"
        if key:
            path += "/" + _encode(key, safe="-_.~/")
        if query:
            path += "?" + "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(query.items()))
        return self.config.endpoint.rstrip("/") + path

    def request(
        self,
        method: str,
        key: str = "",
        *,
        query: Mapping[str, str] | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        signed: bool = True,
    ) -> S3Response:
        """Send one request and return whatever status it got (``signed=False``: anonymous).

        Raises
        ------
        S3Unavailable
            When nothing answers at the endpoint.
        """
        url = self.url(key, query)
        all_headers = dict(headers or {})
        if signed:
            payload = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
            all_headers = sign(self.config, method, url, all_headers, payload)
        # A PUT carries its body even when empty: S3 wants a Content-Length on every PUT.
        data = body if method in ("PUT", "POST") else None
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return S3Response(response.status, _lower(response.headers), response.read())
        except urllib.error.HTTPError as exc:
            return S3Response(exc.code, _lower(exc.headers), exc.read())
        except OSError as exc:
            raise S3Unavailable(
                f"No answer from S3 at {self.config.endpoint}: {getattr(exc, 'reason', exc)}."
            ) from None

    def _check(self, response: S3Response, what: str, ok: tuple[int, ...] = (200,)) -> S3Response:
        if response.status in ok:
            return response
        message = f"{what} in s3://{self.bucket}: HTTP {response.status} {response.error_code}"
        if response.status in (401, 403):
            raise S3AccessDenied(f"S3 refused {message}.")
        if response.status >= 500:
            raise S3Unavailable(f"S3 failed {message}.")
        raise S3Error(f"S3 answered {message}.")

    def bucket_exists(self) -> bool:
        response = self.request("HEAD")
        return self._check(response, "HEAD bucket", (200, 404)).status == 200

    def create_bucket(self) -> None:
        """Create the bucket unless this identity already owns it."""
        response = self.request("PUT")
        if response.status == 409 and response.error_code == "BucketAlreadyOwnedByYou":
            return
        self._check(response, "create bucket")

    def put(self, key: str, body: bytes) -> None:
        self._check(self.request("PUT", key, body=body), f"PUT {key}")

    def put_if_absent(self, key: str, body: bytes) -> bool:
        """Create ``key`` only if no object has that key: ``True`` if this call created it,
        ``False`` if it existed (the server answered 412 and left the object alone)."""
        response = self.request("PUT", key, body=body, headers={"If-None-Match": "*"})
        return self._check(response, f"PUT {key} if absent", (200, 412)).status == 200

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` if there is no such key."""
        response = self._check(self.request("GET", key), f"GET {key}", (200, 404))
        return response.body if response.status == 200 else None

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error (as in S3)."""
        self._check(self.request("DELETE", key), f"DELETE {key}", (200, 204))

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, in S3's order (ListObjectsV2, all pages)."""
        return [o.key for o in self.list_objects(prefix)[0]]

    def list_objects(self, prefix: str = "") -> tuple[tuple[S3Object, ...], datetime | None]:
        """Every object under ``prefix`` with its size and time, and the server's clock at
        the first page (ListObjectsV2, all pages): what a lease needs to tell an expired
        holder from a live one on one clock, the server's."""
        objects: tuple[S3Object, ...] = ()
        server_time: datetime | None = None
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            response = self._check(self.request("GET", query=query), f"LIST {prefix}")
            server_time = server_time or response.server_time
            document = ET.fromstring(response.body)
            objects += tuple(
                S3Object(
                    key=element.findtext(f"{_XMLNS}Key") or "",
                    size=int(element.findtext(f"{_XMLNS}Size") or 0),
                    last_modified=_iso_time(element.findtext(f"{_XMLNS}LastModified")),
                )
                for element in document.iter(f"{_XMLNS}Contents")
            )
            token = document.findtext(f"{_XMLNS}NextContinuationToken") or ""
            if document.findtext(f"{_XMLNS}IsTruncated") != "true" or not token:
                return objects, server_time


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _iso_time(text: str | None) -> datetime:
    if not text:
        return datetime.fromtimestamp(0, UTC)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
