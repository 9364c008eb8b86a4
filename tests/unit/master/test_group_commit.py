"""Group commit: concurrent callers' jobs share transactions, each caller gets its own
result or error, and what a call returned is committed. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from databases import fresh_postgres_database, postgres_available
from sqlalchemy import func, insert, select

from dauntless.master import group_commit
from dauntless.master.db import ClusterRow, Database
from dauntless.master.group_commit import GroupCommit
from dauntless.master.testing import wait_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request, tmp_path):
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/g.db"
        database = Database(url)
        database.migrate()
        yield database
        database.dispose()
        return
    if not postgres_available():
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    with fresh_postgres_database() as url:
        database = Database(url)
        database.migrate()
        yield database
        database.dispose()


def _count(db: Database) -> int:
    with db.read() as s:
        return s.scalar(select(func.count()).select_from(ClusterRow)) or 0


def test_concurrent_jobs_share_transactions_and_keep_their_own_outcome(db):
    commits = GroupCommit(db, max_jobs=8)
    transactions: list[int] = []  # the thread that ran each job
    callers: dict[int, int] = {}  # job -> its caller's thread
    ran_in: dict[int, int] = {}  # job -> the thread whose transaction committed it
    seen_committed: dict[int, bool] = {}
    errors: dict[int, str] = {}
    hold = threading.Event()
    holding = threading.Event()

    def job(i: int):
        def fn(s):
            transactions.append(threading.get_ident())
            ran_in[i] = threading.get_ident()
            if i == 0:
                holding.set()
                hold.wait(60)  # the first leader holds the write lock: the others queue
            if i == 13:
                raise ValueError(f"job {i} refused")
            s.execute(
                insert(ClusterRow.__table__).values(
                    id=100 + i, cluster_id=f"c{i}", created_at=time.time()
                )
            )
            return i * 10

        return fn

    def caller(i: int) -> None:
        callers[i] = threading.get_ident()
        try:
            assert commits.run(job(i)) == i * 10
            with db.read() as s:  # returned: committed, visible to another session
                seen_committed[i] = s.get(ClusterRow, 100 + i) is not None
        except ValueError as exc:
            errors[i] = str(exc)

    first = threading.Thread(target=caller, args=(0,))
    first.start()
    assert holding.wait(30), "the first job never ran"
    others = [threading.Thread(target=caller, args=(i,)) for i in range(1, 20)]
    for t in others:
        t.start()
    # Let them all queue behind the held lock (the queue is GroupCommit's own state).
    wait_for("19 jobs to queue", lambda: len(commits._queue) == 19)
    hold.set()
    for t in [first, *others]:
        t.join(30)
    assert errors == {13: "job 13 refused"}
    assert seen_committed == {i: True for i in range(20) if i != 13}
    assert _count(db) == 19
    # jobs queued behind the held lock ran in a leader's transaction, not their own
    led = [i for i in range(1, 20) if ran_in[i] != callers[i]]
    assert led, "every job ran in its own caller's transaction"


def test_a_lone_job_runs_and_raises_as_itself(db):
    commits = GroupCommit(db)
    assert commits.run(lambda s: 7) == 7
    with pytest.raises(KeyError):
        commits.run(lambda s: {}["missing"])
    with pytest.raises(ValueError, match="max_jobs"):
        GroupCommit(db, max_jobs=0)


def _wait_queued(commits: GroupCommit, n: int) -> None:
    """Until ``n`` jobs are queued (callers queue at once, then wait for a leader)."""
    wait_for(f"{n} jobs to queue", lambda: len(commits._queue) >= n)


def test_batched_items_of_one_transaction_go_to_their_function_together(db):
    commits = GroupCommit(db, max_jobs=16)
    calls: list[list[int]] = []  # the items of each call of the batch function

    def store(s, items: list[int]) -> list[int]:
        calls.append(list(items))
        if 13 in items:
            raise ValueError("item 13 refused")
        for i in items:
            s.execute(
                insert(ClusterRow.__table__).values(
                    id=200 + i, cluster_id=f"b{i}", created_at=time.time()
                )
            )
        return [i * 10 for i in items]

    results: dict[int, int] = {}
    errors: dict[int, str] = {}

    def caller(i: int) -> None:
        try:
            results[i] = commits.run_batched(store, i)
        except ValueError as exc:
            errors[i] = str(exc)

    # Hold the write lock so that the callers queue; then one of them leads them all.
    with db.write_lock:
        threads = [threading.Thread(target=caller, args=(i,)) for i in (1, 2, 3)]
        for t in threads:
            t.start()
        _wait_queued(commits, 3)
        plain = threading.Thread(target=lambda: results.update(plain=commits.run(lambda s: 99)))
        plain.start()
        _wait_queued(commits, 4)
    for t in [*threads, plain]:
        t.join(30)
    assert results == {1: 10, 2: 20, 3: 30, "plain": 99}
    assert [sorted(c) for c in calls] == [[1, 2, 3]]  # one call for the three
    assert _count(db) == 3

    # A refused item: the shared transaction is rolled back, each item then runs alone.
    calls.clear()
    results.clear()
    with db.write_lock:
        threads = [threading.Thread(target=caller, args=(i,)) for i in (4, 13, 5)]
        for t in threads:
            t.start()
        _wait_queued(commits, 3)
    for t in threads:
        t.join(30)
    assert results == {4: 40, 5: 50}
    assert errors == {13: "item 13 refused"}
    assert sorted(calls[0]) == [4, 5, 13] and sorted(calls[1:]) == [[4], [5], [13]]
    assert _count(db) == 5


def test_a_batch_function_must_answer_each_item(db):
    commits = GroupCommit(db)
    with pytest.raises(ValueError, match="returned 0 results for 1 item"):
        commits.run_batched(lambda s, items: [], 1)
    assert commits.run_batched(lambda s, items: [x + 1 for x in items], 1) == 2


def test_coroutines_await_shared_transactions_settled_once_per_transaction(db):
    commits = GroupCommit(db, max_jobs=64)
    calls: list[list[int]] = []

    def store(s, items: list[int]) -> list[int]:
        calls.append(list(items))
        if 13 in items:
            raise ValueError("item 13 refused")
        for i in items:
            s.execute(
                insert(ClusterRow.__table__).values(
                    id=300 + i, cluster_id=f"a{i}", created_at=time.time()
                )
            )
        return [i * 10 for i in items]

    async def main() -> tuple[dict, dict, list[int]]:
        loop = asyncio.get_running_loop()
        settled: list[int] = []  # the futures each call_soon_threadsafe settles
        real = loop.call_soon_threadsafe

        def counted(callback, *args, **kwargs):
            if callback is group_commit._settle:
                settled.append(len(args[0]))
            return real(callback, *args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        results: dict = {}
        errors: dict = {}
        # Queued behind the held write lock (this thread's), the items share one
        # transaction; 13 makes it fail, so each runs alone, in the committer thread.
        with db.write_lock:
            futures = {i: commits.submit_batched(store, i) for i in (1, 13, 2)}
            plain = threading.Thread(target=lambda: results.update(plain=commits.run(lambda s: 9)))
            plain.start()
            _wait_queued(commits, 4)
        for i, future in futures.items():
            try:
                results[i] = await future
                with db.read() as s:  # settled: committed, visible to another session
                    assert s.get(ClusterRow, 300 + i) is not None
            except ValueError as exc:
                errors[i] = str(exc)
        plain.join(30)
        # Then alone: settled when its own transaction committed.
        results[3] = await commits.submit_batched(store, 3)
        del loop.call_soon_threadsafe
        return results, errors, settled

    results, errors, settled = asyncio.run(main())
    assert results == {1: 10, 2: 20, 3: 30, "plain": 9}
    assert errors == {13: "item 13 refused"}
    assert sorted(calls[0]) == [1, 2, 13] and sorted(calls[1:4]) == [[1], [2], [13]]
    assert settled == [3, 1]  # one call_soon_threadsafe per transaction, not per item
    assert _count(db) == 3
    commits.close()
    assert commits._committer is not None and not commits._committer.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(_submit(commits))


async def _submit(commits: GroupCommit) -> None:
    await commits.submit_batched(lambda s, items: items, 1)
