"""What Dauntless does with each experiment-config field that it does not simply act on.

Determined's experiment config (reference §1) has fields Dauntless acts on, fields it
cannot honour on this cluster, and fields Determined 0.38 itself accepts and ignores or
has deprecated. None is silently ignored: :func:`config_refusals` lists the fields a
master must refuse at create (each with the reason), :func:`config_warnings` the
deprecation / ignored-field warnings the master returns with the created experiment and
the CLI prints. Both read the raw config the user wrote (before defaults), so a field
counts as "given" only when the user wrote it with a value other than its default.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["refused", "warned"]

_MISSING = object()


@dataclass(frozen=True)
class FieldRule:
    """One config field that is refused or warned about when given.

    Attributes:
        path: the dotted config path (``environment.image``).
        kind: ``refused`` (the master answers 400 naming the field) or ``warned`` (the
            experiment is created; the warning comes back with it).
        reason: why, for the message.
        default: a value that counts as "not given" (the schema default), besides absent
            and null.
    """

    path: str
    kind: Kind
    reason: str
    default: Any = _MISSING


_IGNORED_038 = "Determined 0.38 accepts and ignores it; so does Dauntless"

FIELD_RULES: tuple[FieldRule, ...] = (
    # -- deprecated in 0.38 but still acted on ---------------------------------------
    FieldRule(
        "searcher.max_length",
        "warned",
        "deprecated since Determined 0.38 (still honoured): set the training length in the "
        "trial's code, Trainer.fit(max_length=Batch(n) or Epoch(n)) or the script's loop",
    ),
    FieldRule(
        "searcher.stop_once",
        "warned",
        "deprecated since Determined 0.38; ASHA with max_time stops trials early, and "
        "with max_length it always stops unpromoted trials",
        default=False,
    ),
    FieldRule(
        "min_validation_period",
        "warned",
        "deprecated since Determined 0.38 (still honoured for a module:Class entrypoint): "
        "use Trainer.fit(validation_period=...)",
        default={"batches": 0},
    ),
    FieldRule(
        "min_checkpoint_period",
        "warned",
        "deprecated since Determined 0.38 (still honoured for a module:Class entrypoint): "
        "use Trainer.fit(checkpoint_period=...)",
        default={"batches": 0},
    ),
    FieldRule(
        "scheduling_unit",
        "warned",
        "deprecated since Determined 0.38 (still used as the reporting period of a "
        "module:Class entrypoint): use Trainer.fit(reporting_period=...)",
        default=100,
    ),
    FieldRule(
        "optimizations.aggregation_frequency",
        "warned",
        "deprecated since Determined 0.38 (still honoured): use "
        "pytorch.init(aggregation_frequency=...)",
        default=1,
    ),
    FieldRule(
        "optimizations.average_aggregated_gradients",
        "warned",
        "deprecated since Determined 0.38 (still honoured): use "
        "context.wrap_optimizer(average_aggregated_gradients=...)",
        default=True,
    ),
    # -- accepted and ignored by Determined itself ----------------------------------
    FieldRule("tensorboard_storage", "warned", _IGNORED_038),
    FieldRule("security", "warned", _IGNORED_038),
    FieldRule("data_layer", "warned", _IGNORED_038),
    FieldRule("internal", "warned", _IGNORED_038),
    FieldRule("optimizations.average_training_metrics", "warned", _IGNORED_038, default=True),
    FieldRule("optimizations.gradient_compression", "warned", _IGNORED_038, default=False),
    FieldRule("optimizations.mixed_precision", "warned", _IGNORED_038, default="O0"),
    FieldRule("optimizations.tensor_fusion_threshold", "warned", _IGNORED_038, default=64),
    FieldRule("optimizations.tensor_fusion_cycle_time", "warned", _IGNORED_038, default=1),
    FieldRule("optimizations.auto_tune_tensor_fusion", "warned", _IGNORED_038, default=False),
    FieldRule("optimizations.grad_updates_size_file", "warned", _IGNORED_038),
    FieldRule(
        "resources.native_parallel", "warned", "a legacy field; " + _IGNORED_038, default=False
    ),
    FieldRule("resources.agent_label", "warned", "a legacy field; " + _IGNORED_038, default=""),
    FieldRule(
        "checkpoint_storage.container_path",
        "warned",
        "a legacy shared_fs field; ignored (checkpoints go under host_path/storage_path)",
    ),
    FieldRule("checkpoint_storage.checkpoint_path", "warned", "a legacy shared_fs field; ignored"),
    FieldRule("checkpoint_storage.tensorboard_path", "warned", "a legacy shared_fs field; ignored"),
    FieldRule(
        "records_per_epoch",
        "warned",
        "used by Determined 0.38 only for legacy Keras trials; Dauntless still uses it to "
        "convert lengths in epochs to batches",
        default=0,
    ),
    FieldRule(
        "pbs", "warned", "applies to the PBS resource manager; this cluster schedules on agents"
    ),
    FieldRule(
        "slurm",
        "warned",
        "applies to the Slurm resource manager; this cluster schedules on agents",
    ),
    FieldRule(
        "integrations.pachyderm",
        "warned",
        "Pachyderm lineage metadata is stored with the config only; nothing reads it",
    ),
    # -- cannot be honoured here ------------------------------------------------------
    FieldRule(
        "environment.pod_spec",
        "refused",
        "applies to Kubernetes pods; this master has no Kubernetes resource manager",
    ),
    FieldRule(
        "environment.ports", "refused", "trial ports are not exposed by this master", default={}
    ),
    FieldRule(
        "environment.proxy_ports",
        "refused",
        "the master's proxy serves notebooks, shells and TensorBoards, not trials",
        default=[],
    ),
    FieldRule(
        "resources.is_single_node",
        "refused",
        "the scheduler always places a trial's slots as it sees fit; it cannot honour it",
    ),
    FieldRule(
        "checkpoint_storage.propagation",
        "refused",
        "mount propagation of the checkpoint mount cannot be set: agents read and write shared_fs "
        "checkpoints in place, without a container mount",
        default="rprivate",
    ),
    FieldRule(
        "resources.slots",
        "refused",
        "a legacy alias that Dauntless does not read; use resources.slots_per_trial",
    ),
)
"""Every refused or warned field (fields not listed are acted on)."""


def _lookup(raw: Any, path: str) -> Any:
    node = raw
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def _given(rule: FieldRule, raw: dict[str, Any]) -> bool:
    value = _lookup(raw, rule.path)
    if value is _MISSING or value is None:
        return False
    # A resolved config (a fork's) spells lengths with null units: {batches: 0, ...}.
    return rule.default is _MISSING or _drop_nulls(value) != rule.default


def config_refusals(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """The fields of a raw config this master must refuse, with the reason.

    Args:
        raw: the config as the user wrote it (a mapping parsed from YAML).

    Returns:
        ``[(field_path, reason), ...]``; empty when nothing is refused.
    """
    return [(r.path, r.reason) for r in FIELD_RULES if r.kind == "refused" and _given(r, raw)]


GP_TRIALS_WARNING = 300
"""Above this ``searcher.max_trials`` a search whose sampler is Optuna's Gaussian process
(``searcher.name: gp``, or ASHA's ``sampler: gp``) is warned about at create. Fitting the
process costs the cube of the observations (a Cholesky factorisation of their n x n
kernel matrix, repeated while its kernel parameters are fitted): on the issue 35
benchmark one proposal took 4.3 CPU seconds at 1,000 observations and 0.6 at 300, and a
master restart replays every proposal of the search (the searcher's exact-restart
guarantee), about the sum of them (n * cost(n) / 4 for a cubic cost): roughly a CPU
minute at 300 trials, 20 CPU minutes at 1,000. ``tpe``, ``cmaes`` and ``nsgaii`` stay near 10 ms a proposal at 1,000
(``benchmarks/search_efficiency.py --suite model``)."""


def _gp_warning(raw: dict[str, Any]) -> str | None:
    searcher = raw.get("searcher") if isinstance(raw, dict) else None
    if not isinstance(searcher, dict):
        return None
    if searcher.get("name") != "gp" and searcher.get("sampler") != "gp":
        return None
    trials = searcher.get("max_trials")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials <= GP_TRIALS_WARNING:
        return None
    return (
        f"searcher.max_trials: {trials} trials with the gp sampler: each proposal costs "
        f"the cube of the observations so far (about 4 CPU seconds at 1,000) and a master "
        f"restart replays every proposal; above {GP_TRIALS_WARNING} trials prefer tpe or "
        "cmaes, or split the search"
    )


def config_warnings(raw: dict[str, Any]) -> list[str]:
    """Warnings for the deprecated or ignored fields a raw config gives, and for a
    Gaussian-process search larger than :data:`GP_TRIALS_WARNING` trials.

    Args:
        raw: the config as the user wrote it.

    Returns:
        One message per field, ``"<path>: <reason>"``; also one for a ``module:Class``
        entrypoint (deprecated in 0.38, still run).
    """
    out = [f"{r.path}: {r.reason}" for r in FIELD_RULES if r.kind == "warned" and _given(r, raw)]
    gp = _gp_warning(raw)
    if gp is not None:
        out.append(gp)
    entry = raw.get("entrypoint") if isinstance(raw, dict) else None
    if isinstance(entry, str) and ":" in entry and " " not in entry.strip():
        out.append(
            "entrypoint: a module:Class entrypoint is deprecated since Determined 0.38 (still "
            "run through the legacy harness): write a script that calls Trainer.fit()"
        )
    return out
