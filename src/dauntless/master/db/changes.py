"""In-memory change counters of database rows, so that waiters need not re-read them."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Mapper, ORMExecuteState, Session, sessionmaker

# A version: (epoch, count). The epoch changes when the table of counts is cleared, so a
# version read before a clear never equals one read after it.
Version = tuple[int, int]


class RowVersions:
    """A change counter per key (e.g. an allocation's id) of one ORM class's rows.

    Every committed session that added, changed or deleted a row of ``model`` through
    the ORM bumps the counter of that row's key. A waiter reads :meth:`version`, reads
    the rows from the database, and then only needs to read them again once
    :meth:`version` differs: comparing two versions costs no database access.

    Counts are bumped after the commit (SQLAlchemy's ``after_flush`` collects the keys
    of the session's new, dirty and deleted objects, ``after_commit`` publishes them;
    a rollback drops them), so a waiter that sees a new version reads the new rows. A
    row marked dirty whose values did not change bumps its key too: a waiter then reads
    the rows once for nothing, which is harmless. Changes the ORM does not see (bulk
    ``UPDATE``/``DELETE`` statements, a foreign key's ``ON DELETE CASCADE``, another
    process) bump nothing: waiters must still read the rows now and then.

    The table of counts holds at most ``max_keys`` keys; when it would grow past that
    it is cleared and its epoch advances, so every waiter sees a change and reads its
    rows once.

    Args:
        sessions: the session factory whose sessions to watch.
        model: the mapped class whose rows to count.
        key: the key of a row (an instance of ``model``).
        max_keys: keys kept before the table is cleared (>= 1).

    Raises:
        ValueError: if ``max_keys`` < 1.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        model: type,
        key: Callable[[Any], Hashable],
        max_keys: int = 10_000,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        self._model = model
        self._key = key
        self._max_keys = max_keys
        self._info_key = f"dauntless.row_versions.{id(self)}"
        self._lock = threading.Lock()
        self._epoch = 0
        self._total = 0
        self._counts: dict[Hashable, int] = {}
        self._listeners: list[Callable[[set[Hashable] | None], None]] = []
        event.listen(sessions, "after_flush", self._after_flush)
        event.listen(sessions, "after_commit", self._after_commit)
        event.listen(sessions, "after_rollback", self._after_rollback)

    def version(self, key: Hashable) -> Version:
        """The current version of ``key``'s rows (any key: one never changed has count 0)."""
        with self._lock:
            return self._epoch, self._counts.get(key, 0)

    def total(self) -> int:
        """How many times any key was bumped so far: a reader that does not know its key
        before reading compares this before and after (equal: no commit of a watched
        row was published meanwhile, so :meth:`version` read after is that of its read)."""
        with self._lock:
            return self._total

    def listen(self, callback: Callable[[set[Hashable] | None], None]) -> None:
        """Call ``callback(keys)`` after each bump, outside the lock, in the thread that
        bumped (the committing one): ``keys`` are the bumped keys, or None when the
        table was cleared (every key's version changed). It must be quick and must not
        raise (a heartbeat held as a long poll is woken this way)."""
        with self._lock:
            self._listeners.append(callback)

    def bump(self, keys: set[Hashable]) -> None:
        """Mark ``keys``' rows changed (the watched sessions do this on commit)."""
        if not keys:
            return
        cleared = False
        with self._lock:
            if len(self._counts) + len(keys) > self._max_keys:
                self._counts.clear()
                self._epoch += 1
                cleared = True
            for k in keys:
                self._counts[k] = self._counts.get(k, 0) + 1
            self._total += 1
            listeners = list(self._listeners)
        for callback in listeners:
            callback(None if cleared else keys)

    def _after_flush(self, session: Session, flush_context: Any) -> None:
        keys = None
        for obj in itertools.chain(session.new, session.dirty, session.deleted):
            if isinstance(obj, self._model):
                if keys is None:
                    keys = session.info.setdefault(self._info_key, set())
                keys.add(self._key(obj))

    def _after_commit(self, session: Session) -> None:
        keys = session.info.pop(self._info_key, None)
        if keys:
            self.bump(keys)

    def _after_rollback(self, session: Session) -> None:
        session.info.pop(self._info_key, None)


class ChangeFlag:
    """A flag set when a committed session changed rows of some ORM classes.

    Used to skip work whose inputs did not change (the scheduler's placement, issue 19;
    the WebUI's event streams, issue 22). A row counts as changed when it was added or
    deleted, or when an attribute outside ``ignore[its class]`` changed (``last_heartbeat``
    of an agent, say). As with :class:`RowVersions`, changes the ORM does not see (bulk
    statements, other processes) do not set it: users must still do the work now and then.

    One user clears the flag with :meth:`take`; any number of users can instead each
    remember :meth:`version` (a count of the changes seen) and redo their work once it
    differs, without clearing anything for the others.

    A change of an attribute named in ``coarse[its class]`` counts only when the key
    function given there maps the old and the new value to different keys: with
    ``{"state": lambda v: v == "TERMINATED"}`` an allocation going from ASSIGNED to
    RUNNING does not count, one that ends does.

    With ``bulk`` the flag also sees the bulk statements run through a session
    (``s.execute(insert/update/delete(Model or its table) ...)``, SQLAlchemy's
    ``do_orm_execute`` event): an ``INSERT`` or ``DELETE`` of a watched class's table
    counts, an ``UPDATE`` unless every column it sets is ignored (an agent's heartbeat,
    which sets ``last_heartbeat`` only); ``coarse`` does not apply to them (their old
    values are not known). Plain-text SQL, foreign key cascades and other processes
    still go unseen.

    Args:
        sessions: the session factory whose sessions to watch.
        models: the mapped classes whose rows count.
        ignore: per class, attribute names whose changes do not count.
        coarse: per class, attribute name -> key function of its values (see above).
        bulk: also count bulk statements (see above).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        models: tuple[type, ...],
        ignore: dict[type, frozenset[str]] | None = None,
        coarse: dict[type, dict[str, Callable[[Any], Hashable]]] | None = None,
        bulk: bool = False,
    ) -> None:
        self._models = models
        self._ignore = ignore or {}
        self._coarse = coarse or {}
        # Table -> column names whose bulk updates do not count.
        self._tables: dict[Any, frozenset[str]] = {}
        for m in models if bulk else ():
            mapper: Mapper[Any] = inspect(m)
            self._tables[mapper.local_table] = frozenset(
                mapper.column_attrs[k].columns[0].name
                for k in self._ignore.get(m, frozenset())
                if k in mapper.column_attrs
            )
        self._info_key = f"dauntless.change_flag.{id(self)}"
        self._set = threading.Event()
        self._set.set()  # nothing seen yet: the first user does the work
        self._lock = threading.Lock()
        self._version = 0
        event.listen(sessions, "after_flush", self._after_flush)
        event.listen(sessions, "after_commit", self._after_commit)
        event.listen(sessions, "after_rollback", self._after_rollback)
        if bulk:
            event.listen(sessions, "do_orm_execute", self._bulk)

    def take(self) -> bool:
        """Whether the flag was set (and clear it)."""
        if self._set.is_set():
            self._set.clear()
            return True
        return False

    def set(self) -> None:
        """Set the flag and advance :meth:`version` (a change the ORM cannot see)."""
        with self._lock:
            self._version += 1
        self._set.set()

    def version(self) -> int:
        """How many changes were seen so far: commits that changed watched rows, and
        calls of :meth:`set` (0 at first). A reader that remembers the version it read
        before doing its work needs to redo it only once the version differs. Read it
        *before* reading the rows, so that a commit in between is not missed."""
        with self._lock:
            return self._version

    def forget(self, session: Session) -> None:
        """Drop what ``session`` flushed so far: its commit sets the flag only for
        changes flushed after this call.

        For the user of the flag itself: a placement's own allocations, flushed after
        it read everything they depend on, need no second placement (issue 19).
        """
        session.flush()
        session.info.pop(self._info_key, None)

    def _changed(self, obj: Any) -> bool:
        ignore = self._ignore.get(type(obj), frozenset())
        coarse = self._coarse.get(type(obj), {})
        if not ignore and not coarse:
            return True
        for attr in inspect(obj).attrs:
            if attr.key in ignore:
                continue
            history = attr.history
            if not history.has_changes():
                continue
            key = coarse.get(attr.key)
            if key is None:
                return True
            old = {key(v) for v in history.deleted}
            new = {key(v) for v in history.added}
            if old != new:
                return True
        return False

    def _after_flush(self, session: Session, flush_context: Any) -> None:
        if session.info.get(self._info_key):
            return
        for obj in itertools.chain(session.new, session.deleted):
            if isinstance(obj, self._models):
                session.info[self._info_key] = True
                return
        for obj in session.dirty:
            if isinstance(obj, self._models) and self._changed(obj):
                session.info[self._info_key] = True
                return

    def _bulk(self, state: ORMExecuteState) -> None:
        if not (state.is_insert or state.is_update or state.is_delete):
            return
        ignored = self._tables.get(getattr(state.statement, "table", None))
        if ignored is None:
            return
        if state.is_update and ignored:
            # The columns an UPDATE sets: its values() (SQLAlchemy keeps them in
            # ``_values``, no public accessor); unknown ones count.
            values = getattr(state.statement, "_values", None) or {}
            names = {getattr(c, "name", c) for c in values}
            if names and names <= ignored:
                return
        state.session.info[self._info_key] = True

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(self._info_key, None):
            self.set()

    def _after_rollback(self, session: Session) -> None:
        session.info.pop(self._info_key, None)
