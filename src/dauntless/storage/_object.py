"""Checkpoints in object stores: S3 (and S3-compatible servers), GCS and Azure Blob.

Layout: the files of checkpoint ``<uuid>`` are the objects ``<prefix>/<uuid>/<relative
path>``; TensorBoard files and other non-checkpoint data live under other keys of the same
prefix (see :meth:`StorageManager.upload_prefix`). A checkpoint is written to a local
staging directory first and uploaded file by file (``CheckpointContext`` sends each file
as it is closed: ``_stream.py``), ``metadata.json`` last; an upload that fails removes
the objects it wrote. One that dies with its process leaves objects that the master
knows of: the harness reports the checkpoint as ``UPLOADING`` before the first byte goes
up (docs/protocol.md, "Checkpoint layout"), and checkpoint GC deletes those.

Each store talks through its vendor's client (``boto3``, ``google-cloud-storage``,
``azure-storage-blob``), an optional extra of the package; the clients' own retry
policies (bounded, with exponential backoff) handle transient errors.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._base import StorageManager, check_storage_id, full_disk_error

METADATA_FILE = "metadata.json"

#: Seconds a client waits to connect to the store, and for an answer.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
#: Attempts per request (the clients back off exponentially between them).
MAX_ATTEMPTS = 5


class StoreError(RuntimeError):
    """A checkpoint store refused a request or could not be reached (after its client's
    retries); the message names the operation, the store URL (bucket and key) and the
    store's error.

    Attributes:
        url: ``s3://bucket/key`` (or ``gs://``, ``azure://``) the request was about.
    """

    def __init__(self, op: str, url: str, cause: BaseException) -> None:
        super().__init__(f"checkpoint store error: {op} {url} failed: {_describe(cause)}")
        self.url = url


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def require_extra(module: str, extra: str, storage_type: str) -> Any:
    """Import a store's client library or say which extra installs it.

    Args:
        module: the module to import, e.g. ``"boto3"``.
        extra: the package extra that installs it, e.g. ``"s3"``.
        storage_type: the ``checkpoint_storage.type`` needing it.

    Returns:
        The imported module.

    Raises:
        ImportError: naming the extra (``pip install 'dauntless[s3]'``) when it is missing.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"checkpoint_storage.type {storage_type!r} needs the {module} package, which is "
            f"not installed: pip install 'dauntless[{extra}]'"
        ) from exc


class ObjectStorageManager(StorageManager):
    """Checkpoints as objects ``<prefix>/<uuid>/<file>`` in a bucket (or container).

    Subclasses implement five object calls (:meth:`_put`, :meth:`_get`, :meth:`_list`,
    :meth:`_delete_keys`, and the ``scheme``/``bucket`` naming); this class turns them
    into the :class:`StorageManager` interface. Clients are made lazily (the first
    request), one per thread, so building a manager never touches the network.

    Args:
        bucket: the bucket (S3, GCS) or container (Azure).
        prefix: the key prefix under which checkpoints live; ``""``/None for the root.
            Leading and trailing ``/`` are ignored.
        staging_dir: where checkpoints are written before upload and downloaded for
            reading; the system's temporary directory when None.
    """

    scheme = ""

    def __init__(
        self, bucket: str, prefix: str | None = None, staging_dir: str | None = None
    ) -> None:
        if not isinstance(bucket, str) or not bucket:
            raise ValueError(f"bucket must be a non-empty str, got {bucket!r}")
        prefix = (prefix or "").strip("/")
        if ".." in prefix.split("/"):
            raise ValueError(f"prefix must not contain '..', got {prefix!r}")
        self.bucket = bucket
        self.prefix = prefix
        self.staging_dir = staging_dir
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url('')!r})"

    # ------------------------------------------------------------------ naming

    def key(self, rel: str) -> str:
        """The object key of a path relative to the storage root (``<prefix>/<rel>``)."""
        rel = rel.lstrip("/")
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def url(self, rel: str) -> str:
        """``scheme://bucket/<prefix>/<rel>``: how errors and listings name an object."""
        return f"{self.scheme}://{self.bucket}/{self.key(rel)}"

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._make_client()
        return client

    # ------------------------------------------------------------------ the object calls

    @abc.abstractmethod
    def _make_client(self) -> Any:
        """A new client of the store (called once per thread)."""

    @abc.abstractmethod
    def _put(self, local: Path, key: str) -> None:
        """Upload one file to ``key``."""

    @abc.abstractmethod
    def _get(self, key: str, local: Path) -> None:
        """Download ``key`` into the file ``local`` (its directory exists)."""

    @abc.abstractmethod
    def _list(self, key_prefix: str) -> dict[str, int]:
        """``{key: size_in_bytes}`` of every object whose key starts with ``key_prefix``."""

    @abc.abstractmethod
    def _delete_keys(self, keys: list[str]) -> None:
        """Delete these objects (a missing one is not an error)."""

    def _call(self, op: str, key: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except StoreError:
            raise
        except OSError as exc:
            # A full local disk (downloading) is not the store's fault: say where.
            full = full_disk_error(exc, Path(exc.filename)) if exc.filename else None
            if full is not None:
                raise full from exc
            raise StoreError(op, f"{self.scheme}://{self.bucket}/{key}", exc) from exc
        except Exception as exc:
            raise StoreError(op, f"{self.scheme}://{self.bucket}/{key}", exc) from exc

    # ------------------------------------------------------------------ prefixes

    def list_prefix(self, rel: str) -> dict[str, int]:
        """``{path relative to rel: size_in_bytes}`` of the objects under ``rel``
        (a path relative to the storage root, such as ``"tensorboard/experiment/3"``).

        Raises:
            StoreError: the store could not be listed.
        """
        base = self.key(rel).rstrip("/") + "/"
        found = self._call("list", base, self._list, base)
        return dict(sorted((k[len(base) :], size) for k, size in found.items()))

    def download_prefix(self, rel: str, dst: str | os.PathLike[str]) -> dict[str, int]:
        """Copy every object under ``rel`` into the local directory ``dst`` (created).

        Returns:
            ``{relative path: size}`` of the files copied.

        Raises:
            StoreError: the store refused a request.
            OSError: the local disk refused a write (``no space left on device at``).
        """
        files = self.list_prefix(rel)
        root = Path(dst)
        root.mkdir(parents=True, exist_ok=True)
        base = self.key(rel).rstrip("/") + "/"
        for name in files:
            target = _safe_join(root, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            self._call("download", base + name, self._get, base + name, target)
        return files

    def upload_prefix(self, src: str | os.PathLike[str], rel: str) -> dict[str, int]:
        """Upload the files under the local directory ``src`` to ``rel`` (overwriting).

        Returns:
            ``{relative path: size}`` of the files uploaded.

        Raises:
            StoreError: the store refused a request.
        """
        files = _local_files(Path(src))
        base = self.key(rel).rstrip("/") + "/"
        for name in files:
            self._call("upload", base + name, self._put, Path(src, name), base + name)
        return files

    def delete_prefix(self, rel: str) -> int:
        """Delete every object under ``rel``; returns how many there were.

        Raises:
            StoreError: the store refused a request.
        """
        base = self.key(rel).rstrip("/") + "/"
        keys = sorted(self._call("list", base, self._list, base))
        if keys:
            self._call("delete", base, self._delete_keys, keys)
        return len(keys)

    # ------------------------------------------------------------------ checkpoints

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[Path]:
        check_storage_id(storage_id)
        with self.staging(storage_id) as path:
            yield path
            self.upload_checkpoint(path, storage_id)

    @contextlib.contextmanager
    def staging(self, storage_id: str) -> Iterator[Path]:
        """A local directory to write checkpoint ``storage_id`` into, removed at the end
        of the block (upload it with :meth:`upload_checkpoint` inside the block)."""
        tmp = Path(tempfile.mkdtemp(prefix=f"dauntless-{storage_id}-", dir=self.staging_dir))
        try:
            try:
                yield tmp
            except (OSError, RuntimeError) as exc:
                if isinstance(exc, StoreError):
                    raise
                full = full_disk_error(exc, tmp)
                if full is None:
                    raise
                raise full from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def upload_checkpoint(self, src: str | os.PathLike[str], storage_id: str) -> dict[str, int]:
        """Upload a complete local checkpoint directory as checkpoint ``storage_id``.

        Files go up one by one, ``metadata.json`` last; if any upload fails the objects
        already written are deleted (best effort) before the error is raised.

        Returns:
            ``{relative path: size}`` of the files uploaded (the checkpoint's resources).

        Raises:
            StoreError: the store refused an upload or could not be reached.
        """
        check_storage_id(storage_id)
        files = _local_files(Path(src))
        order = sorted(files, key=lambda n: (n == METADATA_FILE, n))
        done: list[str] = []
        try:
            for name in order:
                key = self.key(f"{storage_id}/{name}")
                self._call("upload", key, self._put, Path(src, name), key)
                done.append(key)
        except BaseException:
            if done:
                with contextlib.suppress(Exception):
                    self._delete_keys(done)
            raise
        return files

    @contextlib.contextmanager
    def restore_path(self, storage_id: str) -> Iterator[Path]:
        check_storage_id(storage_id)
        tmp = Path(tempfile.mkdtemp(prefix=f"dauntless-{storage_id}-", dir=self.staging_dir))
        try:
            files = self.download_prefix(storage_id, tmp)
            if not files:
                raise FileNotFoundError(f"no checkpoint {storage_id} at {self.url(storage_id)}/")
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def delete(self, storage_id: str) -> bool:
        check_storage_id(storage_id)
        return self.delete_prefix(storage_id) > 0

    def resources(self, storage_id: str) -> dict[str, int]:
        check_storage_id(storage_id)
        files = self.list_prefix(storage_id)
        if not files:
            raise FileNotFoundError(f"no checkpoint {storage_id} at {self.url(storage_id)}/")
        return files


def _safe_join(root: Path, name: str) -> Path:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"object name {name!r} would leave the download directory")
    return root.joinpath(*parts)


def _local_files(root: Path) -> dict[str, int]:
    if not root.is_dir():
        raise FileNotFoundError(f"directory {str(root)!r} does not exist")
    out: dict[str, int] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath, name)
            if full.is_file():
                out[full.relative_to(root).as_posix()] = full.stat().st_size
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------- S3


class S3StorageManager(ObjectStorageManager):
    """``checkpoint_storage.type: s3`` through ``boto3`` (the ``s3`` extra).

    Args:
        bucket: the bucket (it must exist).
        prefix: key prefix of the checkpoints.
        access_key, secret_key: static credentials; both None for boto3's credential
            chain (``AWS_ACCESS_KEY_ID``..., ``~/.aws``, instance roles).
        endpoint_url: an S3-compatible server instead of AWS, e.g.
            ``http://127.0.0.1:8333``.
        staging_dir: see :class:`ObjectStorageManager`.

    Raises:
        ImportError: ``boto3`` is not installed (names the ``s3`` extra).
    """

    scheme = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        endpoint_url: str | None = None,
        staging_dir: str | None = None,
    ) -> None:
        require_extra("boto3", "s3", "s3")
        super().__init__(bucket, prefix, staging_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.endpoint_url = endpoint_url

    @classmethod
    def from_config(cls, config: Any) -> S3StorageManager:
        """Build from a validated ``s3`` config."""
        return cls(
            config.bucket, config.prefix, config.access_key, config.secret_key, config.endpoint_url
        )

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session()
        return session.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
                retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                # S3-compatible servers answer path-style URLs; AWS answers both.
                s3={"addressing_style": "path"} if self.endpoint_url else None,
            ),
        )

    def _put(self, local: Path, key: str) -> None:
        self._client().upload_file(str(local), self.bucket, key)

    def _get(self, key: str, local: Path) -> None:
        self._client().download_file(self.bucket, key, str(local))

    def _list(self, key_prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        pages = self._client().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=key_prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = int(obj["Size"])
        return out

    def _delete_keys(self, keys: list[str]) -> None:
        client = self._client()
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            chunk = [{"Key": k} for k in keys[i : i + 1000]]
            answer = client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise RuntimeError(
                    f"{len(errors)} object(s) not deleted, first {first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message')}"
                )


# ---------------------------------------------------------------------------- GCS


class GCSStorageManager(ObjectStorageManager):
    """``checkpoint_storage.type: gcs`` through ``google-cloud-storage`` (the ``gcs`` extra).

    Credentials come from Google's default chain; with ``STORAGE_EMULATOR_HOST`` set
    (an emulator such as fake-gcs-server) the client sends none.

    Raises:
        ImportError: ``google-cloud-storage`` is not installed (names the ``gcs`` extra).
    """

    scheme = "gs"

    def __init__(
        self, bucket: str, prefix: str | None = None, staging_dir: str | None = None
    ) -> None:
        require_extra("google.cloud.storage", "gcs", "gcs")
        super().__init__(bucket, prefix, staging_dir)

    @classmethod
    def from_config(cls, config: Any) -> GCSStorageManager:
        """Build from a validated ``gcs`` config."""
        return cls(config.bucket, config.prefix)

    def _make_client(self) -> Any:
        # google-cloud-storage ships no type information (see pyproject's mypy overrides).
        from google.cloud import storage  # type: ignore[attr-defined]

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            return storage.Client(project="dauntless", credentials=AnonymousCredentials())
        return storage.Client()

    def _bucket(self) -> Any:
        return self._client().bucket(self.bucket)

    def _retry(self) -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_timeout(READ_TIMEOUT * MAX_ATTEMPTS)

    def _put(self, local: Path, key: str) -> None:
        # Keys are fresh per checkpoint (uuids), so retrying an upload is safe.
        self._bucket().blob(key).upload_from_filename(
            str(local), retry=self._retry(), timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
        )

    def _get(self, key: str, local: Path) -> None:
        self._bucket().blob(key).download_to_filename(
            str(local), retry=self._retry(), timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
        )

    def _list(self, key_prefix: str) -> dict[str, int]:
        blobs = self._client().list_blobs(
            self.bucket, prefix=key_prefix, retry=self._retry(), timeout=READ_TIMEOUT
        )
        return {b.name: int(b.size or 0) for b in blobs}

    def _delete_keys(self, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        bucket = self._bucket()
        for key in keys:
            try:
                bucket.blob(key).delete(retry=self._retry(), timeout=READ_TIMEOUT)
            except NotFound:
                pass


# ---------------------------------------------------------------------------- Azure


class AzureStorageManager(ObjectStorageManager):
    """``checkpoint_storage.type: azure`` through ``azure-storage-blob`` (the ``azure``
    extra); blobs ``<uuid>/<file>`` in ``container``.

    Args:
        container: the container (it must exist).
        connection_string: an Azure Storage connection string; or
        account_url: the account's blob endpoint, with ``credential`` (account key or
            SAS token) or none.
        staging_dir: see :class:`ObjectStorageManager`.

    Raises:
        ImportError: ``azure-storage-blob`` is not installed (names the ``azure`` extra).
        ValueError: not exactly one of ``connection_string`` and ``account_url``.
    """

    scheme = "azure"

    def __init__(
        self,
        container: str,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: str | None = None,
        staging_dir: str | None = None,
    ) -> None:
        require_extra("azure.storage.blob", "azure", "azure")
        if (connection_string is None) == (account_url is None):
            raise ValueError(
                "checkpoint_storage: give exactly one of connection_string or account_url"
            )
        super().__init__(container, None, staging_dir)
        self.connection_string = connection_string
        self.account_url = account_url
        self.credential = credential

    @classmethod
    def from_config(cls, config: Any) -> AzureStorageManager:
        """Build from a validated ``azure`` config."""
        return cls(
            config.container, config.connection_string, config.account_url, config.credential
        )

    def _make_client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        # The Azure SDK logs every request and response with its headers at INFO
        # (``http_logging_policy``); in a trial that floods the trial log (each
        # checkpoint is dozens of requests) and buries the user's own lines. Failures
        # still surface as exceptions and WARNINGs.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(
            logging.WARNING
        )
        opts: dict[str, Any] = {
            "retry_total": MAX_ATTEMPTS,
            "connection_timeout": CONNECT_TIMEOUT,
            "read_timeout": READ_TIMEOUT,
        }
        if self.connection_string is not None:
            svc = BlobServiceClient.from_connection_string(self.connection_string, **opts)
        else:
            assert self.account_url is not None  # __init__ requires one of the two
            svc = BlobServiceClient(self.account_url, credential=self.credential, **opts)
        return svc.get_container_client(self.bucket)

    def _put(self, local: Path, key: str) -> None:
        with open(local, "rb") as f:
            self._client().upload_blob(key, f, overwrite=True)

    def _get(self, key: str, local: Path) -> None:
        with open(local, "wb") as f:
            self._client().download_blob(key).readinto(f)

    def _list(self, key_prefix: str) -> dict[str, int]:
        return {
            b.name: int(b.size or 0) for b in self._client().list_blobs(name_starts_with=key_prefix)
        }

    def _delete_keys(self, keys: list[str]) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        client = self._client()
        for key in keys:
            try:
                client.delete_blob(key)
            except ResourceNotFoundError:
                pass
