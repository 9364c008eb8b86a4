"""RowVersions: change counters bumped by committed ORM sessions."""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, String, create_engine, delete, insert, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from dauntless.master.db.changes import ChangeFlag, RowVersions


class _Base(DeclarativeBase):
    pass


class Part(_Base):
    __tablename__ = "parts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group: Mapped[str] = mapped_column(String(16))
    flag: Mapped[int] = mapped_column(Integer, default=0)


class Other(_Base):
    __tablename__ = "others"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group: Mapped[str] = mapped_column(String(16))


@pytest.fixture()
def sessions(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    _Base.metadata.create_all(engine)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


def test_commits_bump_the_changed_rows_keys_only(sessions):
    versions = RowVersions(sessions, Part, key=lambda row: row.group)
    a0, b0 = versions.version("a"), versions.version("b")
    assert a0 == b0 == (0, 0)
    with sessions() as s:
        s.add_all([Part(id=1, group="a"), Part(id=2, group="b"), Other(id=1, group="c")])
        s.commit()
    a1, b1 = versions.version("a"), versions.version("b")
    assert a1 != a0 and b1 != b0
    assert versions.version("c") == (0, 0)  # another class's rows are not counted

    with sessions() as s:  # a change to one row: only its key
        s.get(Part, 1).flag = 1
        s.commit()
    assert versions.version("a") != a1 and versions.version("b") == b1
    a2 = versions.version("a")

    with sessions() as s:  # reads, and a change rolled back (after a flush): nothing
        assert s.get(Part, 2).flag == 0
        s.get(Part, 1).flag = 2
        s.flush()
        s.rollback()
    with sessions() as s:
        s.get(Part, 1).flag = 3
        # closed without a commit
    assert versions.version("a") == a2 and versions.version("b") == b1

    with sessions() as s:  # a delete
        s.delete(s.get(Part, 2))
        s.commit()
    assert versions.version("b") != b1 and versions.version("a") == a2

    with sessions() as s:  # a bulk UPDATE bypasses the ORM's unit of work: not seen
        s.execute(update(Part).values(flag=9))
        s.commit()
    assert versions.version("a") == a2


def test_a_full_table_is_cleared_and_every_version_changes(sessions):
    versions = RowVersions(sessions, Part, key=lambda row: row.group, max_keys=2)
    versions.bump({"a", "b"})
    a, b, never = versions.version("a"), versions.version("b"), versions.version("z")
    versions.bump({"c"})  # a third key: the table is cleared, the epoch advances
    assert versions.version("a") != a and versions.version("b") != b
    assert versions.version("z") != never  # even a key never bumped reads as changed
    assert versions.version("c") == (1, 1)
    with pytest.raises(ValueError, match="max_keys must be >= 1, got 0"):
        RowVersions(sessions, Part, key=lambda row: row.group, max_keys=0)


def test_change_flag_counts_committed_changes_outside_ignored_attributes(sessions):
    flag = ChangeFlag(sessions, (Part,), {Part: frozenset({"flag"})})
    assert flag.take() and not flag.take()  # set at first: nothing seen yet
    with sessions() as s:
        s.add(Other(id=1, group="c"))  # another class
        s.commit()
    assert not flag.take()
    with sessions() as s:
        s.add(Part(id=1, group="a"))
        s.commit()
    assert flag.take() and not flag.take()
    with sessions() as s:
        s.get(Part, 1).flag = 5  # an ignored attribute
        s.commit()
    assert not flag.take()
    with sessions() as s:
        s.get(Part, 1).group = "b"
        s.flush()
        s.rollback()  # rolled back: no change
    assert not flag.take()
    with sessions() as s:
        s.get(Part, 1).group = "b"
        s.commit()
    assert flag.take()
    with sessions() as s:
        s.delete(s.get(Part, 1))
        s.commit()
    assert flag.take()
    flag.set()
    assert flag.take()


def test_change_flag_versions_let_many_readers_see_each_change(sessions):
    """Readers comparing versions do not clear anything for each other (unlike take)."""
    flag = ChangeFlag(sessions, (Part,), {Part: frozenset({"flag"})})
    first = flag.version()
    assert first == 0
    with sessions() as s:
        s.add(Part(id=1, group="a"))
        s.commit()
    seen = flag.version()
    assert seen == first + 1
    assert flag.take()  # one user's take leaves the version alone
    assert flag.version() == seen
    with sessions() as s:
        s.get(Part, 1).flag = 5  # an ignored attribute
        s.commit()
    with sessions() as s:
        s.get(Part, 1).group = "b"
        s.flush()
        s.rollback()
    with sessions() as s:
        s.add(Other(id=1, group="c"))
        s.commit()
    assert flag.version() == seen  # nothing that counts
    with sessions() as s:
        s.get(Part, 1).group = "b"
        s.commit()
    assert flag.version() == seen + 1
    flag.set()
    assert flag.version() == seen + 2


def test_change_flag_coarse_attributes_count_only_when_their_key_changes(sessions):
    flag = ChangeFlag(sessions, (Part,), coarse={Part: {"group": lambda g: g == "done"}})
    with sessions() as s:
        s.add(Part(id=1, group="new"))
        s.commit()
    assert flag.take()
    with sessions() as s:
        s.get(Part, 1).group = "running"  # same key (not "done"): no change
        s.commit()
    assert not flag.take()
    with sessions() as s:
        s.get(Part, 1).group = "done"
        s.commit()
    assert flag.take()
    with sessions() as s:
        s.get(Part, 1).flag = 3  # not coarse, not ignored: counts
        s.commit()
    assert flag.take()


def test_change_flag_forget_drops_what_the_session_flushed_so_far(sessions):
    flag = ChangeFlag(sessions, (Part,))
    flag.take()
    with sessions() as s:
        s.add(Part(id=1, group="a"))
        flag.forget(s)  # flushed, then forgotten: the commit does not set the flag
        s.commit()
    assert not flag.take()
    with sessions() as s:
        s.get(Part, 1).group = "b"
        flag.forget(s)
        s.add(Part(id=2, group="c"))  # flushed after forget(): counts
        s.commit()
    assert flag.take()


def test_total_counts_every_published_bump(sessions):
    versions = RowVersions(sessions, Part, lambda row: row.group)
    before = versions.total()
    with sessions() as s:
        s.add(Other(id=1, group="x"))  # another class: no bump
        s.commit()
    assert versions.total() == before
    with sessions() as s:
        s.add_all([Part(id=1, group="a"), Part(id=2, group="b")])
        s.commit()
    assert versions.total() == before + 1  # one commit, one bump


def test_change_flag_with_bulk_counts_bulk_statements_unless_they_set_ignored_columns(
    sessions,
):
    flag = ChangeFlag(sessions, (Part,), ignore={Part: frozenset({"flag"})}, bulk=True)
    plain = ChangeFlag(sessions, (Part,), ignore={Part: frozenset({"flag"})})
    with sessions() as s:
        s.execute(insert(Part), [{"id": 1, "group": "a"}, {"id": 2, "group": "b"}])
        s.commit()
    assert flag.version() == 1 and plain.version() == 0  # bulk: seen only with bulk=True
    with sessions() as s:  # a bulk UPDATE of an ignored column only (a heartbeat)
        s.execute(update(Part).where(Part.id == 1).values(flag=5))
        s.commit()
    assert flag.version() == 1
    with sessions() as s:  # one that sets a watched column too
        s.execute(update(Part).where(Part.id == 1).values(flag=6, group="c"))
        s.commit()
    assert flag.version() == 2
    with sessions() as s:  # through the table, not the class: the same
        s.execute(delete(Part.__table__).where(Part.__table__.c.id == 2))
        s.commit()
    assert flag.version() == 3
    with sessions() as s:  # rolled back, or of another class: nothing
        s.execute(delete(Part))
        s.rollback()
        s.execute(delete(Other))
        s.commit()
    assert flag.version() == 3 and plain.version() == 0
