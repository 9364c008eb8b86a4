"""Engine, sessions and schema migrations of the master database.

SQLite (WAL journal) is the default; PostgreSQL is reached with a
``postgresql+psycopg://`` URL. The schema is owned by Alembic: :func:`upgrade` brings a
database to the newest revision at start, and :func:`check_schema` refuses to run against a
database newer than this code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from .changes import ChangeFlag, RowVersions

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

# Alembic is imported where a schema is read or migrated, not at import: the metric fold
# worker (dauntless.master.fold_worker), started with every master, needs neither.

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


class SchemaError(RuntimeError):
    """The database schema is not one this master can use; the message says what to do."""


#: 19 or more digits in a row: an integer that may not fit 64 bits (a float's shortest
#: repr has at most 17 significant digits).
_LONG_DIGITS = re.compile(r"\d{19}")
_LONG_DIGITS_B = re.compile(rb"\d{19}")


def loads_json(doc: str | bytes) -> Any:
    """Parse a stored JSON document (every ``JSON`` column is read through this), with
    the results of Python's parser.

    orjson where it gives the same result: several times faster than Python's parser,
    which on a page of 1,000 metrics reports of 20 values was most of the read (issue
    19, benchmarks/metric_read.py). Python's parser for the rest: what orjson refuses
    (the bare ``NaN`` / ``Infinity`` that Python's encoder, the columns' writer, puts into
    SQLite for non-finite floats) and documents with 19 or more digits in a row, which
    may hold an integer beyond 64 bits that orjson would turn into a float.

    Raises:
        ValueError: the document is not JSON.
    """
    if isinstance(doc, bytes):
        exact = _LONG_DIGITS_B.search(doc) is None
    else:
        exact = _LONG_DIGITS.search(doc) is None
    if exact:
        try:
            return orjson.loads(doc)
        except orjson.JSONDecodeError:
            pass
    return json.loads(doc)


def dumps_json(value: Any) -> str:
    """``value`` as a JSON document, for statements that bind JSON as text (the
    PostgreSQL store of training reports, :mod:`dauntless.master.metric_store`).

    orjson where it can (several times faster than Python's encoder, which was a tenth
    of the master's CPU per report of 256 metrics, issue 19); Python's encoder for what
    orjson refuses (integers beyond 64 bits, keys that are not strings). Non-finite
    floats must have been replaced before (``metric_store.finite_json``): orjson writes
    them as ``null``, Python's encoder as ``NaN``, which PostgreSQL refuses.

    Raises:
        TypeError: ``value`` holds something neither encoder takes (a set, say).
    """
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


SQLITE_SOFT_HEAP_BYTES = 4 * 2**20
"""SQLite's soft heap limit in this process (``PRAGMA soft_heap_limit``, bytes): above
it SQLite frees cached pages before it allocates more. Without it each pooled connection
keeps a page cache of up to 2 MB, filled as the database grows: 1.3 MB of SQLite memory
in a fresh master, 7.7 MB after 850 trials (issue 37; ``sqlite3_status64`` from inside
the master). Pages dropped are read again from the operating system's cache."""


def make_engine(url: str) -> Engine:
    """Create an engine for ``url``.

    SQLite connections get WAL journaling, foreign keys, a 30 s busy timeout and the
    process-wide :data:`SQLITE_SOFT_HEAP_BYTES`; a bare
    ``postgresql://`` URL is routed to the psycopg 3 driver. ``JSON`` columns are parsed
    with :func:`loads_json` (and written by SQLAlchemy's default, Python's encoder).
    """
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            json_deserializer=loads_json,
            future=True,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA soft_heap_limit={SQLITE_SOFT_HEAP_BYTES}")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, json_deserializer=loads_json, future=True)


def _alembic_config(engine: Engine) -> AlembicConfig:
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    """The newest migration revision this code knows."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    if head is None:
        raise SchemaError("no migrations found in " + str(MIGRATIONS_DIR))
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_schema(engine: Engine) -> None:
    """Raise :class:`SchemaError` if the database was written by a newer Dauntless."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(cfg)
    rev = current_revision(engine)
    if rev is None:
        return
    try:
        known = script.get_revision(rev) is not None
    except CommandError:
        known = False
    if not known:
        raise SchemaError(
            f"the database is at schema revision {rev!r}, which this Dauntless "
            f"({head_revision()}) does not know: it was written by a newer version; "
            "upgrade Dauntless or point the master at another database"
        )


def upgrade(engine: Engine) -> None:
    """Apply every pending migration (Alembic ``upgrade head``)."""
    from alembic import command

    check_schema(engine)
    command.upgrade(_alembic_config(engine), "head")


#: ``revision = "0023"`` / ``down_revision: str | None = "0017"`` lines of a migration.
_REVISION_LINE = re.compile(
    r"^(revision|down_revision)\s*(?::[^=\n]*)?=\s*(None|\"[^\"\n]*\"|'[^'\n]*')\s*$", re.M
)


def head_from_files(versions: Path = MIGRATIONS_DIR / "versions") -> str | None:
    """The newest revision, read from the migration files' text without Alembic.

    Each ``*.py`` file of ``versions`` must assign ``revision`` and ``down_revision``
    literals on lines of their own (as Alembic's template writes them); the head is the
    one revision no file names as its ``down_revision``.

    Importing Alembic and its migration scripts costs the master about 12 MB of resident
    memory that it never gives back (issue 37); :meth:`Database.migrate` compares this
    with the database's revision and skips Alembic when they are equal.

    Returns:
        The head revision; None when a file lacks either line, a value is not a plain
        string literal, or the files do not form a single chain (then the caller asks
        Alembic, which gives the real answer or error).
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted(versions.glob("*.py")):
        found = dict((m[0], m[1]) for m in _REVISION_LINE.findall(path.read_text()))
        rev, down = found.get("revision"), found.get("down_revision")
        if rev is None or down is None or rev == "None":
            return None
        revisions.add(rev[1:-1])
        if down != "None":
            parents.add(down[1:-1])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def schema_at_head(engine: Engine) -> bool:
    """Whether the database's ``alembic_version`` holds exactly :func:`head_from_files`'s
    revision (plain SQL: no Alembic import). False also for an empty database and when
    the head cannot be read from the files."""
    head = head_from_files()
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").fetchall()
    except DBAPIError:  # no alembic_version table: a new database
        return False
    return [row[0] for row in rows] == [head]


def migrate_in_child(url: str) -> bool:
    """Bring the database at ``url`` to the newest revision in a forked child process,
    so that Alembic, Mako and the migration scripts are never imported into this one
    (about 12 MB of the master's resident memory, issue 37).

    Call it before any thread starts (a forked child gets only the calling thread, and
    locks other threads hold stay held in it) and before this process opens a
    connection to the database. The child's errors are not reported here: on False the
    caller migrates in-process (:meth:`Database.migrate`), which raises them as it
    always did.

    Returns:
        True when the child migrated (or found the schema current); False where
        ``os.fork`` does not exist or the child failed.
    """
    if not hasattr(os, "fork"):
        return False
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's exit handlers
        code = 1
        try:
            db = Database(url)
            db.migrate()
            db.engine.dispose()
            code = 0
        except BaseException:  # noqa: BLE001 - the parent migrates again and raises
            pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


_HELD = "dauntless.held_rows"
_MEMO = "dauntless.held_memo"


def held_memo(session: Session) -> dict[Hashable, Any] | None:
    """A dict for the life of ``session`` where a model function may remember what it
    read, when the session holds its rows (:func:`hold_rows`: a short transaction under
    the write lock, which no other writer changes meanwhile); None for any other
    session, whose readers must read again."""
    memo: dict[Hashable, Any] | None = session.info.get(_MEMO)
    return memo


def hold_rows(session: Session) -> None:
    """Keep every object that becomes persistent in ``session`` (loaded, inserted,
    merged) strongly referenced from ``session.info`` until the session is closed.

    The session's identity map holds its objects weakly, so a row a model function
    loaded and let go is read again by the next one's ``Session.get`` (a statement);
    held, the lookup is answered from the identity map, as SQLAlchemy's own
    "strong reference" recipe does (SQLAlchemy documentation, "Session Referencing
    Behavior"). Only for short transactions: nothing is let go before the session
    closes."""
    held: list[Any] = []
    session.info[_HELD] = held
    session.info[_MEMO] = {}

    def keep(_session: Session, instance: Any) -> None:
        held.append(instance)

    for name in ("pending_to_persistent", "loaded_as_persistent", "detached_to_persistent"):
        event.listen(session, name, keep)


class Database:
    """The master's database handle.

    Writes are serialised by one process-wide lock: the master is a single process and the
    database is its source of truth, so read-modify-write cycles (searcher state,
    scheduling) never interleave. Reads take no lock.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.write_lock = threading.RLock()

    def migrate(self) -> None:
        """Bring the schema to the newest revision; without importing Alembic when the
        database is already there (:func:`schema_at_head`).

        Raises:
            SchemaError: the database was written by a newer Dauntless.
        """
        if schema_at_head(self.engine):
            return
        upgrade(self.engine)

    def analyze(self) -> None:
        """Refresh SQLite's query-planner statistics (``ANALYZE`` under
        ``PRAGMA analysis_limit=400``: at most about 400 rows read per index, so it takes
        milliseconds also on a large database). Without them SQLite picks indexes by
        their shape alone, and an experiment search with a broad best-metric range then
        walks ``ix_experiments_metric_best`` over every experiment instead of the
        hyperparameter index (tens of ms instead of one, issue 31). PostgreSQL keeps its
        own statistics (autovacuum): nothing is done there."""
        if self.engine.dialect.name != "sqlite":
            return
        with self.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA analysis_limit=400")
            conn.exec_driver_sql("ANALYZE")
            conn.commit()

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; closed (never committed) at the end. Objects read stay
        usable, detached, after the block."""
        with self._sessions() as session:
            yield session

    @contextlib.contextmanager
    def write(self, hold: bool = False) -> Iterator[Session]:
        """A session under the write lock; committed on success, rolled back on error.

        With ``hold``, the session keeps a strong reference to every row it loads or
        writes until it closes (:func:`hold_rows`): for a transaction that runs several
        model functions which read the same rows by primary key."""
        with self.write_lock, self._sessions() as session:
            if hold:
                hold_rows(session)
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def row_versions(
        self, model: type, key: Callable[[Any], Hashable], max_keys: int = 10_000
    ) -> RowVersions:
        """Change counters of ``model``'s rows by ``key`` (at most ``max_keys`` keys kept),
        bumped when this database's write sessions commit (see
        :class:`~dauntless.master.db.changes.RowVersions`).

        Raises:
            ValueError: ``max_keys`` < 1.
        """
        return RowVersions(self._sessions, model, key, max_keys)

    def change_flag(
        self,
        models: tuple[type, ...],
        ignore: dict[type, frozenset[str]] | None = None,
        coarse: dict[type, dict[str, Callable[[Any], Hashable]]] | None = None,
        bulk: bool = False,
    ) -> ChangeFlag:
        """A flag set when this database's write sessions commit changes to ``models``
        (see :class:`~dauntless.master.db.changes.ChangeFlag`)."""
        return ChangeFlag(self._sessions, models, ignore, coarse, bulk)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
