"""The system-metrics profiler of the Core API (issue 34 scope 2): real samples of this
machine through psutil, averaged and reported by a background thread; the training
loop's timings within the configured batch range; a no-op off the cluster."""

from __future__ import annotations

import threading

import pytest

from dauntless.config import parse_experiment_config
from dauntless.core import ProfilerContext
from dauntless.core._profiler import SystemSampler, Timings, average


def test_core_and_config_agree_on_groups_and_bucket():
    import dauntless.config as config
    import dauntless.core as core

    assert core.PROFILING_GROUPS == config.PROFILING_GROUPS
    assert core.PROFILER_BUCKET_SECONDS == config.PROFILER_BUCKET_SECONDS


def test_sampler_reads_cpu_memory_disk_and_network():
    sampler = SystemSampler()
    try:
        sample = sampler.sample()
    finally:
        sampler.close()
    assert 0.0 <= sample["cpu"]["cpu_util_simple"] <= 100.0
    assert sample["memory"]["memory_free"] > 0
    assert set(sample["network"]) == {"net_throughput_sent", "net_throughput_recv"}
    assert all(v >= 0 for v in sample["network"].values())
    if "disk" in sample:  # containers may have no block devices
        assert set(sample["disk"]) == {"disk_iops", "disk_throughput_read", "disk_throughput_write"}
    # GPUs only where NVML answers; on this machine, never a fake "gpu" group.
    assert ("gpu" in sample) == (sampler.gpus > 0)


def test_average_takes_the_mean_of_plain_and_nested_values():
    samples = [
        {"cpu": {"u": 10.0}, "gpu": {"G": {"gpu_util": 0.0}}},
        {"cpu": {"u": 30.0}, "gpu": {"G": {"gpu_util": 50.0}}},
        {"cpu": {"u": 20.0}},
    ]
    assert average(samples) == {"cpu": {"u": 20.0}, "gpu": {"G": {"gpu_util": 25.0}}}


def test_timings_give_means_counts_and_the_data_loaders_share():
    t = Timings()
    for _ in range(4):
        t.add("dataloader_next", 0.1)
        t.add("train_batch", 0.3)
    out = t.take()
    assert out["dataloader_next"]["count"] == 4
    assert out["dataloader_next"]["mean_seconds"] == pytest.approx(0.1)
    assert out["train_batch"]["total_seconds"] == pytest.approx(1.2)
    assert out["dataloader_share"] == pytest.approx(0.25)
    assert t.take() == {}  # taken: the next report starts afresh


def test_profiler_thread_reports_averages_and_timings_then_stops():
    reports: list[list[dict]] = []
    got = threading.Event()

    def sink(rows):
        reports.append(rows)
        got.set()

    prof = ProfilerContext(sink, agent_id="agent-7")
    prof.on(sampling_interval=0.1, samples_per_report=2)
    assert prof.enabled
    prof.timings.add("train_batch", 0.5)
    assert got.wait(30), "no report within 30 s"
    prof.off()
    assert not prof.enabled
    threads = [t.name for t in threading.enumerate()]
    assert "dauntless-profiler" not in threads
    rows = [row for report in reports for row in report]
    groups = {row["group"] for row in rows}
    assert {"cpu", "memory", "network", "timing"} <= groups
    assert all(row["agent_id"] == "agent-7" for row in rows)
    timing = next(row for row in rows if row["group"] == "timing")
    assert timing["metrics"]["train_batch"]["mean_seconds"] == pytest.approx(0.5)


def test_a_failing_sink_does_not_stop_the_profiler():
    calls = []

    def sink(rows):
        calls.append(rows)
        raise ConnectionError("master away")

    prof = ProfilerContext(sink)
    prof.on(sampling_interval=0.1, samples_per_report=1)
    deadline = threading.Event()
    for _ in range(300):
        if len(calls) >= 2:
            break
        deadline.wait(0.1)
    prof.off()
    assert len(calls) >= 2


def test_off_the_cluster_the_profiler_is_a_no_op():
    prof = ProfilerContext(None)
    prof.on()
    assert not prof.enabled
    assert not prof.times_batch(0)
    prof.off()


def test_on_checks_its_arguments():
    prof = ProfilerContext(None)
    with pytest.raises(ValueError, match="sampling_interval must be >= 0.1"):
        prof.on(sampling_interval=0.05)
    with pytest.raises(ValueError, match="samples_per_report must be an int >= 1"):
        prof.on(samples_per_report=0)


def test_profiling_begin_and_end_batches_bound_the_timed_batches():
    prof = ProfilerContext(lambda rows: None)
    prof.begin_on_batch, prof.end_after_batch = 3, 5
    assert not prof.times_batch(4)  # off: nothing is timed
    prof.on(sampling_interval=10.0)
    try:
        assert [b for b in range(8) if prof.times_batch(b)] == [3, 4, 5]
        prof.end_after_batch = None
        assert prof.times_batch(10_000)
    finally:
        prof.off()


def test_profiling_config_is_checked():
    base = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "hyperparameters": {},
    }
    cfg = parse_experiment_config({**base, "profiling": {"enabled": True, "sync_timings": False}})
    assert cfg.profiling.enabled and not cfg.profiling.sync_timings
    with pytest.raises(ValueError, match="end_after_batch"):
        parse_experiment_config({**base, "profiling": {"begin_on_batch": 5, "end_after_batch": 2}})
    with pytest.raises(ValueError, match="profiling"):
        parse_experiment_config({**base, "profiling": {"enabeld": True}})


def test_context_takes_the_profiling_section_of_the_config(tmp_path):
    from dauntless.core import Context, LocalBackend, TrialInfo
    from dauntless.storage import DirectoryStorageManager

    section = {"enabled": True, "begin_on_batch": 2, "end_after_batch": 9, "sync_timings": False}
    info = TrialInfo(
        trial_id=1, experiment_id=1, trial_seed=0, hparams={}, config={"profiling": section}
    )
    with Context(info, backend=LocalBackend([1]), storage=DirectoryStorageManager(tmp_path)) as ctx:
        prof = ctx.profiler
        assert (prof.begin_on_batch, prof.end_after_batch, prof.sync_timings) == (2, 9, False)
        assert not prof.enabled  # enabled, but off the cluster the profiler does nothing
