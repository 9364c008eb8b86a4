"""The audit trail: an append-only, hash-chained record of who changed what (issue 30).

**The chain.** Each row of ``audit_log`` (:class:`~dauntless.master.db.AuditRow`)
carries ``prev_hash``, the previous row's ``hash``, and its own ``hash``: the
HMAC-SHA-256 (RFC 2104; Python's ``hmac``) under the master's *audit key* of
``prev_hash`` and every other column, ``id`` included, as canonical JSON. So:

* a row deleted from the middle leaves a gap in the ids (the master numbers rows itself,
  one more than the last) and a ``prev_hash`` that matches nothing;
* an edited row no longer matches its ``hash``;
* rows deleted from the end are found by comparing with the head the master keeps in
  ``<data_dir>/audit_head`` (the database's cluster id and the last id and hash it
  wrote, outside the database; a new database, with another cluster id, starts afresh);
* a forger who can write the database cannot recompute the hashes without the key, which
  lives in ``<data_dir>/audit_key`` (random, mode 0600), not in the database. (With a
  plain unkeyed hash anyone with write access could rewrite the chain from the edited
  row on.)

**Retention** (``audit.retention_days``). Pruning removes the oldest rows and, in the
same transaction, writes a *retention checkpoint* (:class:`AuditCheckpointRow`): the last
removed id, its hash (the new start of the chain) and how many rows went, signed with
the audit key. Verification starts at the latest checkpoint, so the rows kept still
verify, and a checkpoint cannot be made up to hide rows deleted by hand.

Appends are serialised by one lock (the chain is a sequence); what is audited, and when
the row is written, is :mod:`dauntless.master.audit_http`'s.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import delete, func, select

from .db import AuditCheckpointRow, AuditRow, ClusterRow, Database

log = logging.getLogger("dauntless.master.audit")

GENESIS = "0" * 64
"""The ``prev_hash`` of the first row of a chain that was never cut."""

AUDIT_KEY_FILE = "audit_key"
"""The file in the data directory holding the audit key (hex, mode 0600)."""

AUDIT_HEAD_FILE = "audit_head"
"""The file in the data directory holding the last written row's ``id hash``."""

MAX_BREAKS = 100
"""The most breaks one verification lists (it counts them all)."""

VERIFY_CHUNK = 2000
"""Rows read per query while verifying."""


@dataclass(frozen=True)
class AuditEntry:
    """What one audited request did (an :class:`AuditRow` without id and hashes).

    Attributes:
        at: seconds since the epoch.
        user_id, username: who (None for an anonymous caller, e.g. a failed sign-in of
            an unknown name, where ``username`` is the name tried).
        token_kind: ``USER_SESSION``, ``ACCESS_TOKEN`` or ``NONE``.
        token_id: the id of the token used (``det token list``), or None.
        method, route: the HTTP method and the route's path template.
        action: the route's name (``pause_experiment``).
        target: what it acted on (``exp_id=3``, ``user alice``), or None.
        status: the HTTP status answered.
        result: ``ok`` (below 400), ``denied`` (401, 403), ``refused`` (other 4xx) or
            ``error`` (5xx).
        client: the client's address as the master saw it.
    """

    at: float
    user_id: int | None
    username: str | None
    token_kind: str
    token_id: int | None
    method: str
    route: str
    action: str
    target: str | None
    status: int
    result: str
    client: str | None


def result_of(status: int) -> str:
    """``ok``, ``denied``, ``refused`` or ``error`` for an HTTP status."""
    if status < 400:
        return "ok"
    if status in (401, 403):
        return "denied"
    return "refused" if status < 500 else "error"


def row_hash(key: bytes, row_id: int, prev_hash: str, entry: AuditEntry) -> str:
    """The chain hash of a row: HMAC-SHA-256 under ``key`` of the canonical JSON (sorted
    keys, no spaces) of the id, the previous hash and every field of ``entry``."""
    doc = {"id": row_id, "prev_hash": prev_hash, **asdict(entry)}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def checkpoint_signature(key: bytes, at: float, cut_id: int, head_hash: str, removed: int) -> str:
    """The signature of a retention checkpoint: HMAC-SHA-256 under ``key``."""
    text = json.dumps(
        {"kind": "audit-checkpoint", "at": at, "cut_id": cut_id, "head": head_hash, "n": removed},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def entry_of(row: AuditRow) -> AuditEntry:
    """The entry stored in ``row``."""
    return AuditEntry(
        at=row.at,
        user_id=row.user_id,
        username=row.username,
        token_kind=row.token_kind,
        token_id=row.token_id,
        method=row.method,
        route=row.route,
        action=row.action,
        target=row.target,
        status=row.status,
        result=row.result,
        client=row.client,
    )


def load_audit_key(data_dir: str) -> bytes:
    """The audit key in ``<data_dir>/audit_key``, made (256 random bits, mode 0600) when
    missing.

    Raises:
        OSError: the file cannot be read or written.
        ValueError: the file does not hold a hex key.
    """
    path = os.path.join(data_dir, AUDIT_KEY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
        if text:
            return bytes.fromhex(text)
    except FileNotFoundError:
        pass
    value = secrets.token_hex(32)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.replace(path + ".tmp", path)
    log.info("made an audit key in %s (keep it with the database: it verifies the trail)", path)
    return bytes.fromhex(value)


@dataclass
class Verification:
    """What :meth:`AuditTrail.verify` found.

    Attributes:
        ok: no break.
        rows: rows checked.
        first_id, last_id: the ids of the first and last row (None: no rows).
        checkpoint: the retention checkpoint the chain starts from
            (``{cut_id, at, removed}``), or None.
        breaks: ``{"id", "problem"}`` for each break, by id (at most
            :data:`MAX_BREAKS`); ``id`` is the first row concerned.
        break_count: how many breaks in all.
    """

    ok: bool = True
    rows: int = 0
    first_id: int | None = None
    last_id: int | None = None
    checkpoint: dict[str, Any] | None = None
    breaks: list[dict[str, Any]] = field(default_factory=list)
    break_count: int = 0

    def add(self, row_id: int, problem: str) -> None:
        """Record a break at ``row_id``."""
        self.ok = False
        self.break_count += 1
        if len(self.breaks) < MAX_BREAKS:
            self.breaks.append({"id": row_id, "problem": problem})


class AuditTrail:
    """Appends to, verifies and prunes the audit chain of one master.

    Args:
        db: the master database.
        data_dir: where the audit key and the head file live.
        clock: seconds since the epoch.

    Raises:
        OSError, ValueError: the audit key cannot be read or made (see
            :func:`load_audit_key`).
    """

    def __init__(self, db: Database, data_dir: str, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock
        self._key = load_audit_key(data_dir)
        self._head_path = os.path.join(data_dir, AUDIT_HEAD_FILE)
        self._lock = threading.Lock()
        self._head: tuple[int, str] | None = None  # (id, hash) of the last row written
        self._cluster: str | None = None

    # ------------------------------------------------------------------ append

    def append(self, entry: AuditEntry) -> int:
        """Add ``entry`` as the next row of the chain (its own transaction) and return
        its id."""
        with self._lock:
            with self.db.write() as s:
                last_id, last_hash = self._head if self._head is not None else self._load_head(s)
                row_id = last_id + 1
                digest = row_hash(self._key, row_id, last_hash, entry)
                s.add(AuditRow(id=row_id, prev_hash=last_hash, hash=digest, **asdict(entry)))
            self._head = (row_id, digest)
            self._save_head(row_id, digest)
        return row_id

    def _load_head(self, s: Any) -> tuple[int, str]:
        """The head to append after: the database's newest row, unless the head file says
        the master wrote further (rows were deleted from the end while it was stopped):
        then numbering goes on after the file's head, so the gap stays visible."""
        head = _db_head(s)
        saved = self._saved_head()
        if saved is not None and saved[0] > head[0]:
            log.warning(
                "the audit trail ends at row %d but this master wrote up to row %d: rows "
                "were deleted; `det audit verify` reports them",
                head[0],
                saved[0],
            )
            return saved
        return head

    def _cluster_id(self) -> str:
        """The database's cluster id (made with the database): the head file belongs to
        one database, and one made anew (a reset) starts a chain of its own."""
        if self._cluster is None:
            with self.db.read() as s:
                self._cluster = s.scalar(select(ClusterRow.cluster_id)) or "-"
        return self._cluster

    def _save_head(self, row_id: int, digest: str) -> None:
        """Keep the head outside the database (a lower bound: a crash between the commit
        and this write leaves it one behind, which verification accepts)."""
        tmp = f"{self._head_path}.{threading.get_ident()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(f"{self._cluster_id()} {row_id} {digest}\n")
            os.replace(tmp, self._head_path)
        except OSError as exc:
            log.warning("could not record the audit head in %s: %s", self._head_path, exc)

    def _saved_head(self) -> tuple[int, str] | None:
        """The head file's (id, hash), None without one or when it is another
        database's."""
        try:
            with open(self._head_path, encoding="utf-8") as f:
                cluster, text_id, digest = f.read().split()
            if cluster != self._cluster_id():
                return None
            return int(text_id), digest
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ verify

    def verify(self) -> Verification:
        """Walk the chain from its start (or the latest retention checkpoint) and report
        every break: a missing row, an edited row, a bad checkpoint, rows missing at the
        end."""
        out = Verification()
        with self._lock:
            head = self._head or self._saved_head()
        with self.db.read() as s:
            ckpt = s.scalars(
                select(AuditCheckpointRow).order_by(AuditCheckpointRow.cut_id.desc()).limit(1)
            ).first()
            expected_id, expected_prev = 1, GENESIS
            if ckpt is not None:
                out.checkpoint = {"cut_id": ckpt.cut_id, "at": ckpt.at, "removed": ckpt.removed}
                signature = checkpoint_signature(
                    self._key, ckpt.at, ckpt.cut_id, ckpt.head_hash, ckpt.removed
                )
                if not hmac.compare_digest(signature, ckpt.signature):
                    out.add(
                        ckpt.cut_id,
                        f"the retention checkpoint at row {ckpt.cut_id} is not signed by "
                        "this master's audit key (edited or made up)",
                    )
                expected_id, expected_prev = ckpt.cut_id + 1, ckpt.head_hash
            after = expected_id - 1
            while True:
                rows = list(
                    s.scalars(
                        select(AuditRow)
                        .where(AuditRow.id > after)
                        .order_by(AuditRow.id)
                        .limit(VERIFY_CHUNK)
                    )
                )
                if not rows:
                    break
                for row in rows:
                    self._check_row(out, row, expected_id, expected_prev)
                    expected_id, expected_prev = row.id + 1, row.hash
                after = rows[-1].id
            early = s.scalar(select(func.count()).select_from(AuditRow).where(AuditRow.id < 1))
            if ckpt is not None:
                early = s.scalar(
                    select(func.count()).select_from(AuditRow).where(AuditRow.id <= ckpt.cut_id)
                )
            if early:
                out.add(0, f"{early} row(s) lie before the start of the chain")
        if head is not None and head[0] >= expected_id:
            first, last = expected_id, head[0]
            out.add(
                first,
                f"row {first} is missing (deleted)"
                if first == last
                else f"rows {first} to {last} are missing at the end (the master wrote up to "
                f"row {last})",
            )
        return out

    def _check_row(self, out: Verification, row: AuditRow, expected_id: int, prev: str) -> None:
        out.rows += 1
        out.first_id = row.id if out.first_id is None else out.first_id
        out.last_id = row.id
        if row.id != expected_id:
            first, last = expected_id, row.id - 1
            out.add(
                first,
                f"row {first} is missing (deleted): row {row.id}'s previous hash matches no row"
                if first == last
                else f"rows {first} to {last} are missing (deleted): row {row.id}'s previous "
                "hash matches no row",
            )
        elif row.prev_hash != prev:
            out.add(
                row.id,
                f"row {row.id}'s previous hash is not row {row.id - 1}'s hash (one of them "
                "was edited)",
            )
        digest = row_hash(self._key, row.id, row.prev_hash, entry_of(row))
        if not hmac.compare_digest(digest, row.hash):
            out.add(row.id, f"row {row.id} was edited: its hash does not match its content")

    # ------------------------------------------------------------------ retention

    def prune(self, older_than: float) -> int:
        """Remove the rows written before ``older_than`` (seconds since the epoch),
        leaving a signed retention checkpoint at the cut. Returns how many went."""
        with self._lock, self.db.write() as s:
            cut = s.scalar(select(func.max(AuditRow.id)).where(AuditRow.at < older_than))
            if cut is None:
                return 0
            head_hash = s.scalar(select(AuditRow.hash).where(AuditRow.id == cut))
            if head_hash is None:  # the cut row itself was deleted: keep what is there
                return 0
            removed = s.scalar(select(func.count()).select_from(AuditRow).where(AuditRow.id <= cut))
            s.execute(delete(AuditRow).where(AuditRow.id <= cut))
            at = self.clock()
            s.add(
                AuditCheckpointRow(
                    at=at,
                    cut_id=cut,
                    head_hash=head_hash,
                    removed=removed or 0,
                    signature=checkpoint_signature(self._key, at, cut, head_hash, removed or 0),
                )
            )
        log.info("audit retention removed %d row(s), up to row %d", removed or 0, cut)
        return removed or 0


def _db_head(s: Any) -> tuple[int, str]:
    """(id, hash) of the newest row, else of the latest checkpoint, else (0, GENESIS)."""
    row = s.execute(
        select(AuditRow.id, AuditRow.hash).order_by(AuditRow.id.desc()).limit(1)
    ).first()
    if row is not None:
        return int(row[0]), str(row[1])
    ckpt = s.execute(
        select(AuditCheckpointRow.cut_id, AuditCheckpointRow.head_hash)
        .order_by(AuditCheckpointRow.cut_id.desc())
        .limit(1)
    ).first()
    if ckpt is not None:
        return int(ckpt[0]), str(ckpt[1])
    return 0, GENESIS


class RetentionHook:
    """A control-loop hook that prunes the trail once an hour (``audit.retention_days``).

    Args:
        trail: the trail.
        retention_days: days rows are kept.
        every: seconds between prunes.
    """

    def __init__(self, trail: AuditTrail, retention_days: int, every: float = 3600.0):
        self.trail = trail
        self.seconds = retention_days * 86_400.0
        self.every = every
        self._last = float("-inf")

    def __call__(self) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        try:
            self.trail.prune(self.trail.clock() - self.seconds)
        except Exception:  # the loop goes on; the next hour tries again
            log.exception("audit retention failed")
