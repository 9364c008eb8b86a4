"""Exact resume: a run cut into pieces, each a new process, equals an uninterrupted run.

The trial shuffles, uses dropout, an LR schedule and draws from Python's, numpy's and
torch's generators. Pieces stop mid reporting period, on a reporting boundary and on a
validation; each next piece starts in a new process from the previous checkpoint.

The processes are forked from a multiprocessing fork server that imported torch and
nothing ran in it (so a piece starts in milliseconds, not seconds): a piece inherits no
state from the pieces before it, only the checkpoint files.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import resume_piece
import torch

HERE = Path(__file__).resolve().parent
TOTAL = 40
CHAINS = {"k1": [], "k2": [17], "k5": [5, 11, 24, 33]}
_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(
    ["torch", "torch._dynamo", "dauntless.pytorch", "api_trials", "resume_piece"]
)


def _run_chains(tmp_path: Path) -> dict[str, dict]:
    """Run the chains side by side; each piece starts when its chain's previous one ended.

    Returns:
        Per chain: ``pieces`` (each piece's JSON record), ``pids`` (one per piece) and
        ``out`` (the last piece's output prefix).
    """
    chains: dict[str, dict] = {}
    for name, stops in CHAINS.items():
        storage = tmp_path / name
        storage.mkdir()
        chains[name] = {"storage": storage, "stops": [*stops, 0], "pieces": [], "pids": []}
    running: dict[str, multiprocessing.process.BaseProcess] = {}
    while True:
        for name, chain in chains.items():
            proc = running.pop(name, None)
            if proc is not None:
                proc.join(120)
                assert proc.exitcode == 0, f"a piece of {name} exited {proc.exitcode}"
                chain["pieces"].append(json.loads(Path(f"{chain['out']}.json").read_text()))
            i = len(chain["pieces"])
            if i < len(chain["stops"]):
                latest = chain["pieces"][-1]["last_uuid"] if chain["pieces"] else "-"
                chain["out"] = chain["storage"] / f"piece{i}"
                proc = _FORKSERVER.Process(
                    target=resume_piece.main,
                    args=(
                        str(chain["storage"]),
                        TOTAL,
                        chain["stops"][i],
                        latest,
                        str(chain["out"]),
                    ),
                )
                proc.start()
                chain["pids"].append(proc.pid)
                running[name] = proc
        if not running:
            return chains


def test_pieces_in_new_processes_end_bit_identical_with_identical_metrics(tmp_path):
    start = time.monotonic()
    chains = _run_chains(tmp_path)
    print(f"8 pieces in {time.monotonic() - start:.1f} s")
    pids = [pid for chain in chains.values() for pid in chain["pids"]]
    assert len(set(pids)) == len(pids) == 8, "every piece must run in a process of its own"
    final = {
        name: torch.load(Path(str(chain["out"]) + ".pt"), weights_only=True)
        for name, chain in chains.items()
    }
    reference = chains["k1"]["pieces"]
    assert len(reference) == 1 and reference[0]["result"] == "completed"
    ref_training = reference[0]["training"]
    ref_validation = reference[0]["validation"]
    # Training metrics are reported every 5 batches and, as Determined does, whenever
    # training stops for a validation (issue 33: workload boundaries).
    assert [t[0] for t in ref_training] == [5, 10, 12, 15, 20, 24, 25, 30, 35, 36, 40]
    assert [v[0] for v in ref_validation] == [12, 24, 36, 40]

    for name in ("k2", "k5"):
        pieces = chains[name]["pieces"]
        assert len(pieces) == len(CHAINS[name]) + 1
        assert [p["result"] for p in pieces] == ["preempted"] * len(CHAINS[name]) + ["completed"]
        # Parameters and optimizer state are bit-identical.
        for key, tensor in final["k1"]["model"].items():
            assert torch.equal(final[name]["model"][key], tensor), f"{name}: {key} differs"
        for idx, buf in final["k1"]["optimizer"]["state"].items():
            assert torch.equal(
                final[name]["optimizer"]["state"][idx]["momentum_buffer"], buf["momentum_buffer"]
            )
        # The metric histories, stitched across pieces, are the uninterrupted run's.
        training = [t for p in pieces for t in p["training"]]
        validation = [v for p in pieces for v in p["validation"]]
        assert training == ref_training, name
        assert validation == ref_validation, name
        # Each piece but the first restored the callback's state from the checkpoint.
        assert all(p["callback_count"] > 0 for p in pieces)
