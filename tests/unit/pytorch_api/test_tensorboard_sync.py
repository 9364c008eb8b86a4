"""The TensorBoard upload of a trial whose checkpoints go to an object store: after a
checkpoint it runs in the background and is skipped while one is in flight; at the end of
training it waits for that one and then uploads the final files.

The store is a real :class:`~dauntless.storage.ObjectStorageManager` whose bucket is a
local directory and whose every upload waits at a gate the test opens, so "in flight" is
a state the test holds, not a race it hopes to win.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dauntless.core import Context, DistributedContext, LocalBackend, TrialInfo
from dauntless.pytorch._facts import _TrialFacts
from dauntless.storage._object import ObjectStorageManager

CONFIG = {
    "entrypoint": "python3 train.py",
    "hyperparameters": {"global_batch_size": 8},
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
}
PREFIX = "tensorboard/experiment/3/trial/5"


class GatedStore(ObjectStorageManager):
    """Objects are files under ``root``. A put from the background sync's thread (named
    ``tensorboard-sync``) first waits until ``gate`` is set, and sets ``waiting`` while it
    does; puts from other threads go straight through. ``puts`` lists the keys written,
    in order."""

    scheme = "gated"

    def __init__(self, root: Path) -> None:
        super().__init__("bucket")
        self.root = root
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.puts: list[str] = []
        self._puts_lock = threading.Lock()

    def _make_client(self) -> Any:
        return None

    def _put(self, local: Path, key: str) -> None:
        if threading.current_thread().name == "tensorboard-sync":
            self.waiting.set()
            if not self.gate.wait(60):
                raise TimeoutError("the test never opened the gate")
        dst = self.root / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dst)
        with self._puts_lock:
            self.puts.append(key)

    def _get(self, key: str, local: Path) -> None:
        shutil.copyfile(self.root / key, local)

    def _list(self, key_prefix: str) -> dict[str, int]:
        found = {}
        for p in self.root.rglob("*"):
            key = p.relative_to(self.root).as_posix()
            if p.is_file() and key.startswith(key_prefix):
                found[key] = p.stat().st_size
        return found

    def _delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)


@pytest.fixture
def store(tmp_path: Path) -> GatedStore:
    return GatedStore(tmp_path / "bucket")


@pytest.fixture
def facts(
    tmp_path: Path, store: GatedStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[_TrialFacts]:
    """The trial context's facts of trial 5 (experiment 3) on ``store``, the chief of one
    process; its TensorBoard directory lies under ``tmp_path`` (the system's temporary
    directory, where an object store's trial keeps it, is pointed there)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    info = TrialInfo(trial_id=5, experiment_id=3, trial_seed=0, hparams={}, config=CONFIG)
    core = Context(info, backend=LocalBackend([1]), storage=store)
    try:
        yield _TrialFacts(info, core, DistributedContext(), enable_tensorboard_logging=True)
    finally:
        store.gate.set()  # let a sync the test left in flight finish
        core.close()


def test_a_sync_in_flight_makes_the_next_checkpoint_sync_a_skip(
    facts: _TrialFacts, store: GatedStore
) -> None:
    tb = facts.get_tensorboard_path()
    assert tb.is_relative_to(tempfile.gettempdir())
    (tb / "events.1").write_bytes(b"one")
    facts._sync_tensorboard()  # returns at once; its upload waits at the gate
    assert store.waiting.wait(30), "the background upload never started"
    in_flight = facts._tensorboard_sync
    assert in_flight is not None and in_flight.is_alive()
    (tb / "events.2").write_bytes(b"two")
    facts._sync_tensorboard()  # one in flight: skipped, no second thread
    assert facts._tensorboard_sync is in_flight
    store.gate.set()
    in_flight.join(30)
    assert not in_flight.is_alive()
    # Only what the first sync listed went up; the skipped one uploaded nothing.
    assert store.puts == [f"{PREFIX}/events.1"]
    # Once it is done, the next checkpoint's sync runs again.
    facts._sync_tensorboard()
    again = facts._tensorboard_sync
    assert again is not None and again is not in_flight
    again.join(30)
    assert sorted(store.puts) == [f"{PREFIX}/events.1", f"{PREFIX}/events.1", f"{PREFIX}/events.2"]


def test_the_final_sync_waits_for_the_one_in_flight_then_uploads_the_final_files(
    facts: _TrialFacts, store: GatedStore
) -> None:
    tb = facts.get_tensorboard_path()
    (tb / "events.1").write_bytes(b"one")
    facts._sync_tensorboard()
    assert store.waiting.wait(30), "the background upload never started"
    (tb / "events.1").write_bytes(b"one, more")  # written on after the checkpoint
    (tb / "events.2").write_bytes(b"two")
    done = threading.Event()

    def final() -> None:
        facts._sync_tensorboard(wait=True)
        done.set()

    ender = threading.Thread(target=final, daemon=True)
    ender.start()
    # Only the background thread's puts wait at the gate: a final sync that did not wait
    # for the upload in flight would finish now. (This check cannot fail when the code
    # is right.)
    assert not done.wait(0.5), "the final sync did not wait for the one in flight"
    store.gate.set()
    ender.join(30)
    assert done.is_set() and facts._tensorboard_sync is None
    # The background upload first, then every final file, in the caller's thread.
    assert store.puts == [f"{PREFIX}/events.1", f"{PREFIX}/events.1", f"{PREFIX}/events.2"]
    assert store.list_prefix(PREFIX) == {"events.1": 9, "events.2": 3}
    assert (store.root / PREFIX / "events.1").read_bytes() == b"one, more"


def test_a_file_system_storage_needs_no_upload(tmp_path: Path) -> None:
    from dauntless.storage import DirectoryStorageManager

    info = TrialInfo(trial_id=5, experiment_id=3, trial_seed=0, hparams={}, config=CONFIG)
    with Context(info, backend=LocalBackend([1]), storage=DirectoryStorageManager(tmp_path)) as c:
        facts = _TrialFacts(info, c, DistributedContext(), enable_tensorboard_logging=True)
        tb = facts.get_tensorboard_path()
        assert tb == tmp_path / "tensorboard" / "experiment" / "3" / "trial" / "5"
        (tb / "events.1").write_bytes(b"one")
        facts._sync_tensorboard()
        facts._sync_tensorboard(wait=True)
        assert facts._tensorboard_sync is None
