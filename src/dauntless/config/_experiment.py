"""The experiment config: pydantic models with Determined's field names and defaults.

Source of names and defaults: Determined's expconf v0 schema (reference §1). Unknown
fields are rejected everywhere; :func:`parse_experiment_config` turns a raw mapping (the
YAML a user wrote) into a frozen :class:`ExperimentConfig`, or raises
:class:`ConfigError` whose message names each bad field path and what was expected.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from ._hparams import (
    CategoricalHP,
    ConstHP,
    Hyperparameter,
    HyperparameterError,
    IntHP,
    dump_hyperparameters,
    parse_hyperparameters,
)
from ._length import Length
from ._limits import LimitError, check_tree, load_yaml

ENTRYPOINT_CLASS_RE = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_.]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------- searcher


class _SearcherBase(_Strict):
    metric: str = Field(min_length=1)
    smaller_is_better: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None

    @field_validator("max_length", mode="before", check_fields=False)
    @classmethod
    def _unitless_length(cls, v: Any) -> Any:
        # Determined accepts a bare int (``max_length: 100``, the Core API tutorials):
        # a unitless length the script interprets; operations carry the same number.
        if isinstance(v, int) and not isinstance(v, bool):
            return {"batches": v}
        return v


class SingleSearcher(_SearcherBase):
    """One trial; ``max_length`` (deprecated in 0.38) or the trial's code sets its length."""

    name: Literal["single"]
    max_length: Length | None = None


class RandomSearcher(_SearcherBase):
    """``max_trials`` trials with hyperparameters sampled at random."""

    name: Literal["random"]
    max_length: Length | None = None
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)


class GridSearcher(_SearcherBase):
    """The cartesian product of every hyperparameter's grid axis."""

    name: Literal["grid"]
    max_length: Length | None = None
    max_concurrent_trials: int = Field(default=16, ge=0)


class AdaptiveASHASearcher(_SearcherBase):
    """Asynchronous successive halving (Li et al., MLSys 2020) over several brackets.

    Two modes: with ``max_time`` + ``time_metric`` (Determined 0.38) the trials train as
    long as their own code says and the searcher stops them from their reported validation
    metrics; with only the deprecated ``max_length`` (≤0.37) the searcher tells each trial
    how far to train.
    """

    name: Literal["adaptive_asha"]
    max_trials: int = Field(ge=1)
    max_length: Length | None = None
    max_time: int | None = Field(default=None, ge=1)
    time_metric: str | None = None
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    divisor: float = Field(default=4.0, gt=1)
    max_rungs: int = Field(default=5, ge=1)
    bracket_rungs: list[int] = Field(default_factory=list)
    max_concurrent_trials: int = Field(default=16, ge=0)
    stop_once: bool = False
    sampler: Literal["random", "tpe", "cmaes", "gp"] = "random"
    sampler_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _length_or_time(self) -> AdaptiveASHASearcher:
        _check_sampler_options(self.sampler, self.sampler_options)
        if self.max_length is None and self.max_time is None:
            raise ValueError("adaptive_asha needs max_length, or max_time with time_metric")
        if (self.max_time is None) != (self.time_metric is None):
            raise ValueError("max_time and time_metric must be given together")
        return self


class AsyncHalvingSearcher(_SearcherBase):
    """Asynchronous successive halving in one bracket of ``num_rungs`` rungs.

    Same two modes as :class:`AdaptiveASHASearcher` (``max_time`` + ``time_metric``, or the
    deprecated ``max_length``).
    """

    name: Literal["async_halving"]
    num_rungs: int = Field(ge=1)
    max_trials: int = Field(ge=1)
    max_length: Length | None = None
    max_time: int | None = Field(default=None, ge=1)
    time_metric: str | None = None
    divisor: float = Field(default=4.0, gt=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    stop_once: bool = False
    sampler: Literal["random", "tpe", "cmaes", "gp"] = "random"
    sampler_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _length_or_time(self) -> AsyncHalvingSearcher:
        _check_sampler_options(self.sampler, self.sampler_options)
        if self.max_length is None and self.max_time is None:
            raise ValueError("async_halving needs max_time with time_metric (or max_length)")
        if (self.max_time is None) != (self.time_metric is None):
            raise ValueError("max_time and time_metric must be given together")
        return self


SAMPLER_OPTIONS: dict[str, dict[str, tuple[type, ...]]] = {
    "random": {},
    "tpe": {
        "n_startup_trials": (int,),
        "n_ei_candidates": (int,),
        "multivariate": (bool,),
        "group": (bool,),
        "constant_liar": (bool,),
        "consider_endpoints": (bool,),
        "consider_magic_clip": (bool,),
        "consider_prior": (bool,),
        "prior_weight": (int, float),
    },
    "cmaes": {
        "n_startup_trials": (int,),
        "sigma0": (int, float),
        "popsize": (int,),
        "inc_popsize": (int,),
        "restart_strategy": (str,),
        "use_separable_cma": (bool,),
        "with_margin": (bool,),
        "lr_adapt": (bool,),
        "consider_pruned_trials": (bool,),
    },
    "gp": {"n_startup_trials": (int,), "deterministic_objective": (bool,)},
    "nsgaii": {
        "population_size": (int,),
        "mutation_prob": (int, float),
        "crossover_prob": (int, float),
        "swapping_prob": (int, float),
    },
}
"""The keyword arguments of each Optuna sampler that ``searcher.sampler_options`` passes
through, with their JSON types. Options that take Python objects (callables, other
samplers) cannot be written in a config and are not listed; ``seed`` comes from the
experiment seed."""


def _check_sampler_options(sampler: str, options: dict[str, Any]) -> None:
    """Raise ValueError naming an option the sampler does not take or a wrong type."""
    known = SAMPLER_OPTIONS[sampler]
    for key, value in options.items():
        if key not in known:
            raise ValueError(
                f"sampler_options.{key}: not an option of the {sampler} sampler; "
                f"known: {sorted(known) or 'none'}"
            )
        types = known[key]
        if isinstance(value, bool) and bool not in types:
            ok = False
        else:
            ok = isinstance(value, types)
        if not ok:
            names = " or ".join(t.__name__ for t in types)
            raise ValueError(f"sampler_options.{key}: expected {names}, got {value!r}")


class SearchMetric(_Strict):
    """One objective of a multi-objective search (``searcher.metrics`` entries)."""

    name: str = Field(min_length=1)
    smaller_is_better: bool = True


class _ModelSearcher(_SearcherBase):
    """Shared by the Optuna samplers ``tpe``, ``cmaes``, ``gp`` and ``nsgaii``.

    ``metrics`` (two or more objectives) makes the search multi-objective; its first
    entry is then ``metric`` / ``smaller_is_better`` (the searcher metric the rest of the
    platform shows and keeps checkpoints by). Without ``max_length`` the trial's own code
    decides its length and the searcher learns the last validation it reported.
    """

    metric: str = ""
    metrics: list[SearchMetric] = Field(default_factory=list)
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)
    max_length: Length | None = None
    sampler_options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _metric_from_metrics(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("metrics"), list) and data["metrics"]:
            first = data["metrics"][0]
            if isinstance(first, dict) and "name" in first:
                data = dict(data)
                data.setdefault("metric", first["name"])
                data.setdefault("smaller_is_better", first.get("smaller_is_better", True))
        return data

    @model_validator(mode="after")
    def _objectives(self) -> _ModelSearcher:
        if not self.metric:
            raise ValueError("give metric (one objective) or metrics (several)")
        if self.metrics:
            first = self.metrics[0]
            if (first.name, first.smaller_is_better) != (self.metric, self.smaller_is_better):
                raise ValueError(
                    "metric and smaller_is_better must be those of the first entry of "
                    f"metrics ({first.name!r}); leave them out with metrics"
                )
            names = [m.name for m in self.metrics]
            if len(set(names)) != len(names):
                raise ValueError(f"metrics: each objective once, got {names}")
            if len(names) > 1 and getattr(self, "name", "") == "cmaes":
                raise ValueError("metrics: the cmaes sampler optimizes one objective only")
        _check_sampler_options(getattr(self, "name", "tpe"), self.sampler_options)
        return self

    def objectives(self) -> list[SearchMetric]:
        """Every objective: ``metrics``, or the one ``metric``."""
        return list(self.metrics) or [
            SearchMetric(name=self.metric, smaller_is_better=self.smaller_is_better)
        ]


class TPESearcher(_ModelSearcher):
    """Optuna's tree-structured Parzen estimator (Bergstra et al., NeurIPS 2011);
    multi-objective with ``metrics`` (MOTPE, Ozaki et al. 2020)."""

    name: Literal["tpe"]


class CmaEsSearcher(_ModelSearcher):
    """Optuna's CMA-ES sampler (Hansen, 2016 tutorial); one objective."""

    name: Literal["cmaes"]


class GPSearcher(_ModelSearcher):
    """Optuna's Gaussian-process Bayesian optimization sampler."""

    name: Literal["gp"]


class NSGAIISearcher(_ModelSearcher):
    """Optuna's NSGA-II (Deb et al., 2002): a genetic multi-objective search."""

    name: Literal["nsgaii"]


class ReplaceFunction(_Strict):
    """PBT's ``replace_function``: each round the worst ``truncate_fraction`` of the
    population is closed and replaced by clones of the best as many."""

    truncate_fraction: float = Field(ge=0.0, le=0.5)


class ExploreFunction(_Strict):
    """PBT's ``explore_function``: how a clone's hyperparameters move from its parent's."""

    resample_probability: float = Field(ge=0.0, le=1.0)
    perturb_factor: float = Field(ge=0.0, le=1.0)


class PBTSearcher(_SearcherBase):
    """Population-based training (Jaderberg et al., 2017), with the fields of Determined's
    removed ``pbt`` searcher (reference platform §11.2)."""

    name: Literal["pbt"]
    population_size: int = Field(ge=1)
    num_rounds: int = Field(ge=1)
    length_per_round: Length
    replace_function: ReplaceFunction
    explore_function: ExploreFunction

    @field_validator("length_per_round", mode="before")
    @classmethod
    def _unitless_round(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return {"batches": v}
        return v

    @model_validator(mode="after")
    def _positive_round(self) -> PBTSearcher:
        if self.length_per_round.value < 1:
            raise ValueError("length_per_round must be at least 1")
        return self


class CustomSearcher(_SearcherBase):
    """A search method of your own (Determined ≤0.37's ``custom`` searcher).

    ``method`` (``module:Class`` in the context directory) runs the method inside the
    master, where the master config allows it (``custom_searchers.in_master``); without
    it the master waits for a remote search runner to answer its events
    (:mod:`dauntless.searcher.custom`, docs/protocol.md). ``unit`` is the unit of the
    lengths the method's ``ValidateAfter`` operations give.
    """

    name: Literal["custom"]
    unit: Literal["batches", "records", "epochs"] = "batches"
    method: str | None = None

    @field_validator("method")
    @classmethod
    def _module_class(cls, v: str | None) -> str | None:
        if v is not None and not ENTRYPOINT_CLASS_RE.match(v):
            raise ValueError(f"expected 'module:Class' (a SearchMethod subclass), got {v!r}")
        return v


MODEL_SEARCHERS = ("tpe", "cmaes", "gp", "nsgaii")
"""The searchers backed by an Optuna sampler (the ``search`` extra)."""


SearcherConfig = Annotated[
    Union[
        SingleSearcher,
        RandomSearcher,
        GridSearcher,
        AdaptiveASHASearcher,
        AsyncHalvingSearcher,
        TPESearcher,
        CmaEsSearcher,
        GPSearcher,
        NSGAIISearcher,
        PBTSearcher,
        CustomSearcher,
    ],
    Field(discriminator="name"),
]

REMOVED_SEARCHERS = {
    "adaptive": "the 'adaptive' searcher was removed in Determined 0.38; use adaptive_asha",
    "adaptive_simple": "'adaptive_simple' was removed in Determined 0.38; use adaptive_asha",
    "sync_halving": "'sync_halving' was removed in Determined 0.38; use adaptive_asha",
}
"""Searcher names Determined 0.38 rejects, with the reason given at create."""


def searcher_length(config: ExperimentConfig) -> Length | None:
    """The training length the searcher hands out as operations (≤0.37 mode), or None.

    None means the 0.38 model: the trial's own code decides how long it trains (Trainer
    ``fit(max_length=...)`` or the script's loop) and reports validation metrics, from
    which ASHA decides to stop it. single/random/grid hand out ``max_length`` when it is
    given. ASHA hands out its deprecated ``max_length`` when it has no ``max_time``; with
    ``max_time`` and ``time_metric: batches`` it still hands out rung lengths in batches
    to a ``module:Class`` entrypoint (or a config without entrypoint, as the pure searcher
    tests and previews use): that legacy harness trains exactly to each rung, so the
    length-driven mode gives the same decisions without overshooting a rung. ``pbt``
    (``length_per_round``) and ``custom`` (a length of 0 in its ``unit``: the method
    decides) always hand out operations.
    """
    searcher = config.searcher
    if isinstance(searcher, PBTSearcher):
        return searcher.length_per_round
    if isinstance(searcher, CustomSearcher):
        # The method decides every length; the unit stands for "operations drive".
        return Length(**{searcher.unit: 0})
    max_time = getattr(searcher, "max_time", None)
    if max_time is not None:
        if getattr(searcher, "time_metric", None) == "batches" and (
            config.entrypoint is None or config.is_trial_class()
        ):
            return Length(batches=max_time)
        return None
    return getattr(searcher, "max_length", None)


# ---------------------------------------------------------------------------- storage


class _StorageBase(_Strict):
    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class SharedFSStorage(_StorageBase):
    """Checkpoints under ``<host_path>/<storage_path>/<uuid>/`` on a shared file system."""

    type: Literal["shared_fs"]
    host_path: str = Field(min_length=1)
    storage_path: str | None = None
    propagation: str = "rprivate"
    container_path: str | None = None
    checkpoint_path: str | None = None
    tensorboard_path: str | None = None

    @field_validator("host_path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"host_path must be an absolute path, got {v!r}")
        return v


class DirectoryStorage(_StorageBase):
    """Checkpoints under ``container_path``, a directory already visible to tasks."""

    type: Literal["directory"]
    container_path: str = Field(min_length=1)


def _check_prefix(v: str | None) -> str | None:
    if v is not None and ".." in v.split("/"):
        raise ValueError("prefix must not contain '..'")
    return v


class S3Storage(_StorageBase):
    """Checkpoints in an S3 bucket: ``s3://<bucket>/<prefix>/<uuid>/``.

    ``access_key``/``secret_key`` default to the standard AWS credential chain (the
    ``AWS_*`` environment variables, ``~/.aws``, instance roles); ``endpoint_url`` names
    an S3-compatible server (MinIO, SeaweedFS, Ceph) instead of AWS. Needs the ``s3``
    extra: ``pip install 'dauntless[s3]'``.
    """

    type: Literal["s3"]
    bucket: str = Field(min_length=1)
    prefix: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None

    @field_validator("prefix")
    @classmethod
    def _no_dotdot(cls, v: str | None) -> str | None:
        return _check_prefix(v)

    @model_validator(mode="after")
    def _both_keys(self) -> S3Storage:
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("access_key and secret_key must be given together")
        return self


class GCSStorage(_StorageBase):
    """Checkpoints in a Google Cloud Storage bucket: ``gs://<bucket>/<prefix>/<uuid>/``.

    Credentials come from Google's default chain (``GOOGLE_APPLICATION_CREDENTIALS``, a
    service-account key file, or the machine's metadata server);
    ``STORAGE_EMULATOR_HOST`` points the client at an emulator. Needs the ``gcs``
    extra: ``pip install 'dauntless[gcs]'``.
    """

    type: Literal["gcs"]
    bucket: str = Field(min_length=1)
    prefix: str | None = None

    @field_validator("prefix")
    @classmethod
    def _no_dotdot(cls, v: str | None) -> str | None:
        return _check_prefix(v)


class AzureStorage(_StorageBase):
    """Checkpoints in an Azure Blob Storage container: ``<container>/<uuid>/``.

    Give exactly one of ``connection_string`` or ``account_url``; with ``account_url``,
    ``credential`` is an account key or SAS token (omitted: no credential, for a
    public or SAS-in-URL container). Needs the ``azure`` extra:
    ``pip install 'dauntless[azure]'``.
    """

    type: Literal["azure"]
    container: str = Field(min_length=1)
    connection_string: str | None = None
    account_url: str | None = None
    credential: str | None = None

    @model_validator(mode="after")
    def _one_way_in(self) -> AzureStorage:
        if (self.connection_string is None) == (self.account_url is None):
            raise ValueError("give exactly one of connection_string or account_url")
        if self.connection_string is not None and self.credential is not None:
            raise ValueError("credential cannot be given with connection_string")
        return self


CheckpointStorageConfig = Annotated[
    Union[SharedFSStorage, DirectoryStorage, S3Storage, GCSStorage, AzureStorage],
    Field(discriminator="type"),
]


# ---------------------------------------------------------------------------- the rest


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)(i?)([bB]?)\s*$")


def parse_size(value: int | str) -> int:
    """A size in bytes from an int or a string such as ``"4G"``, ``"512Mi"``, ``"64m"``.

    Units are binary (k = 1024), as Docker's ``--shm-size`` reads them; ``i`` and a
    trailing ``b``/``B`` are accepted and change nothing. Written here rather than taken
    from a library because it is one regular expression and must agree with Docker's
    reading exactly.

    Raises:
        ValueError: a negative number, a bool, or a string in another form.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected bytes as an int or a string like '4G', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a size >= 0 bytes, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if m is None:
        raise ValueError(
            f"expected bytes as an int or a string like '4G', '512M', '1Gi'; got {value!r}"
        )
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * 1024**power)


class DeviceConfig(_Strict):
    """One ``resources.devices`` entry: a host device made available in a container."""

    host_path: str
    container_path: str
    mode: str = "mrw"

    @field_validator("host_path", "container_path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"expected an absolute path, got {v!r}")
        return v

    @field_validator("mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        if not v or set(v) - set("rwm"):
            raise ValueError(f"expected a combination of r, w and m, got {v!r}")
        return v

    @classmethod
    def from_string(cls, text: str) -> DeviceConfig:
        """Parse ``"/host[:/container[:mode]]"`` (Docker's ``--device`` form).

        Raises:
            ValueError: not in that form.
        """
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not parts[0]:
            raise ValueError(f"expected '/host/path[:/container/path[:mode]]', got {text!r}")
        container = parts[1] if len(parts) > 1 and parts[1] else parts[0]
        mode = parts[2] if len(parts) > 2 else "mrw"
        try:
            return cls(host_path=parts[0], container_path=container, mode=mode)
        except ValidationError as exc:
            raise ValueError(f"device {text!r}: {exc.errors()[0]['msg']}") from None


class ResourcesConfig(_Strict):
    """``resources``: slots, pool and scheduling knobs of every trial."""

    slots_per_trial: int = Field(default=1, ge=0)
    resource_pool: str = ""
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float = Field(default=1.0, gt=0)
    max_slots: int | None = Field(default=None, ge=0)
    shm_size: int | str | None = None
    devices: list[str | DeviceConfig] = Field(default_factory=list)
    is_single_node: bool | None = None
    agent_label: str | None = None
    native_parallel: bool = False
    slots: int | None = None  # legacy; refused at create (see _fields.FIELD_RULES)

    @field_validator("shm_size")
    @classmethod
    def _shm_size(cls, v: int | str | None) -> int | str | None:
        if v is not None:
            parse_size(v)  # ValueError names what is expected
        return v

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: list[str | DeviceConfig]) -> list[str | DeviceConfig]:
        for item in v:
            if isinstance(item, str):
                DeviceConfig.from_string(item)
        return v

    def shm_size_bytes(self) -> int | None:
        """``shm_size`` in bytes, or None when not set."""
        return None if self.shm_size is None else parse_size(self.shm_size)

    def device_list(self) -> list[DeviceConfig]:
        """``devices`` with the ``"/host:/container[:mode]"`` strings parsed."""
        return [DeviceConfig.from_string(d) if isinstance(d, str) else d for d in self.devices]


class EnvironmentConfig(_Strict):
    """``environment``: what a task's process sees.

    ``image`` and the container fields are acted on by the docker and podman runtimes
    (:mod:`dauntless.agent.runtimes`); the master places a task that names an image
    only on an agent that has one. ``python_requirements`` (ours, not Determined's): a
    list of pip requirements, or the path of a requirements file in the context
    directory, installed into a cached virtual environment layered over the agent's
    own Python (process runtime) or with pip at the start of the container.
    """

    environment_variables: list[str] | dict[str, list[str]] = Field(default_factory=list)
    image: str | dict[str, str] | None = None
    force_pull_image: bool = False
    registry_auth: dict[str, Any] | None = None
    ports: dict[str, int] = Field(default_factory=dict)
    proxy_ports: list[dict[str, Any]] = Field(default_factory=list)
    add_capabilities: list[str] = Field(default_factory=list)
    drop_capabilities: list[str] = Field(default_factory=list)
    pod_spec: dict[str, Any] | None = None
    python_requirements: list[str] | str | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        if isinstance(v, str) and not v.strip():
            raise ValueError("expected an image name, got an empty string")
        if isinstance(v, dict):
            unknown = sorted(set(v) - {"cpu", "cuda", "gpu", "rocm"})
            if unknown:
                raise ValueError(f"unknown device types {unknown}; expected cpu, cuda or rocm")
        return v

    @field_validator("python_requirements")
    @classmethod
    def _requirements(cls, v: list[str] | str | None) -> list[str] | str | None:
        if isinstance(v, str):
            if not v.strip() or v.startswith("/") or ".." in v.split("/"):
                raise ValueError(
                    "expected a list of requirements, or the relative path of a "
                    f"requirements file in the context directory; got {v!r}"
                )
        elif isinstance(v, list):
            for item in v:
                if not item.strip() or "\n" in item:
                    raise ValueError(f"expected one pip requirement per item, got {item!r}")
        return v

    def image_for(self, device: str = "cpu") -> str | None:
        """The image for a slot type (``cpu``, ``cuda``, ``rocm``); ``gpu`` is an old
        name for ``cuda``. None when no image is set, or the map has none for it."""
        v = self.image
        if v is None or isinstance(v, str):
            return v
        if device == "cuda":
            return v.get("cuda") or v.get("gpu")
        return v.get(device)

    @field_validator("environment_variables")
    @classmethod
    def _kv(cls, v: list[str] | dict[str, list[str]]) -> list[str] | dict[str, list[str]]:
        lists = v.values() if isinstance(v, dict) else [v]
        for items in lists:
            for item in items:
                if "=" not in item or item.startswith("="):
                    raise ValueError(f"expected 'NAME=value', got {item!r}")
        return v

    def variables_for(self, device: str = "cpu") -> dict[str, str]:
        """The variables as a dict, for a slot type (``cpu``, ``cuda``, ``rocm``); a
        per-device map's ``gpu`` list is an old name for ``cuda``."""
        v = self.environment_variables
        if isinstance(v, dict):
            items = v.get(device) or (v.get("gpu", []) if device == "cuda" else [])
        else:
            items = v
        return dict(item.split("=", 1) for item in items)


PROPAGATIONS = ("rprivate", "private", "rshared", "shared", "rslave", "slave")


class BindMount(_Strict):
    """One ``bind_mounts`` entry: ``host_path`` seen by the task at ``container_path``."""

    host_path: str
    container_path: str
    read_only: bool = False
    propagation: Literal["rprivate", "private", "rshared", "shared", "rslave", "slave"] = "rprivate"

    @field_validator("host_path")
    @classmethod
    def _host_absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"expected an absolute path, got {v!r}")
        return v

    @field_validator("container_path")
    @classmethod
    def _container(cls, v: str) -> str:
        if v in (".", "") or not v.startswith("/") or ".." in v.split("/"):
            raise ValueError(f"expected an absolute path without '..' (not '.'), got {v!r}")
        if v.rstrip("/") in ("", "/proc", "/sys", "/dev"):
            raise ValueError(f"{v!r} cannot be a mount point of a task")
        return v


class ReproducibilityConfig(_Strict):
    """``reproducibility.experiment_seed``: 0..2**31-1; the master picks one if absent."""

    experiment_seed: int | None = Field(default=None, ge=0, le=2**31 - 1)


PROFILING_GROUPS = ("cpu", "memory", "disk", "network", "gpu", "timing")
"""The groups of profiler metrics (Determined's ``gpu, cpu, memory, disk, network``,
plus ``timing``: seconds the training loop spent in the data loader and the step)."""

PROFILER_BUCKET_SECONDS = 10
"""The master keeps one profiler row per trial, agent and group per this many seconds
of its clock (the latest report in it); the default profiler reports exactly this often."""


class ProfilingConfig(_Strict):
    """``profiling`` (Determined's legacy section, reference §1.5), acted on by the
    system-metrics profiler (:class:`dauntless.core.ProfilerContext`).

    Attributes:
        enabled: turn the profiler on for the whole trial (any kind of trial).
        begin_on_batch: first batch (0-based) whose data loader and step are timed.
        end_after_batch: last batch timed (None: no end); >= ``begin_on_batch``.
        sync_timings: wait for the GPU's queued work before reading the step's clock
            (true: the step's real time; false: only its launch, and no stall).
    """

    enabled: bool = False
    begin_on_batch: int = Field(default=0, ge=0)
    end_after_batch: int | None = Field(default=None, ge=0)
    sync_timings: bool = True

    @model_validator(mode="after")
    def _range(self) -> ProfilingConfig:
        if self.end_after_batch is not None and self.end_after_batch < self.begin_on_batch:
            raise ValueError(
                f"profiling.end_after_batch ({self.end_after_batch}) must be >= "
                f"profiling.begin_on_batch ({self.begin_on_batch})"
            )
        return self


LOG_POLICY_ACTIONS = ("cancel_retries", "exclude_node")


class LogPolicy(_Strict):
    """One entry of ``log_policies`` (Determined 0.38, reference §1.5).

    ``pattern`` is a Python regular expression searched in every line the trial's
    processes print; when one matches, the policy's ``name`` labels the trial and its
    ``action`` applies: ``cancel_retries`` (a failure of the trial is not restarted) or
    ``exclude_node`` (its restarts avoid the agent that printed the line). The legacy form
    ``action: {type: cancel_retries}`` is accepted. A policy with a built-in's name and no
    pattern turns that built-in off.
    """

    name: str | None = None
    pattern: str | None = None
    action: Literal["cancel_retries", "exclude_node"] | None = None

    @field_validator("action", mode="before")
    @classmethod
    def _legacy_action(cls, v: Any) -> Any:
        if isinstance(v, dict):
            if set(v) != {"type"}:
                raise ValueError(
                    f"a legacy action is {{type: cancel_retries|exclude_node}}, got {v!r}"
                )
            return v["type"]
        return v

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _named_or_patterned(self) -> LogPolicy:
        if self.name is None and self.pattern is None:
            raise ValueError("a log policy needs a name or a pattern")
        return self


class ExperimentRetentionPolicy(_Strict):
    """``retention_policy`` of an experiment (Determined's name; issue 34).

    Attributes:
        log_retention_days: days the trials' logs are kept after each trial ends
            (-1: forever; 0: deleted at the master's next cleanup); the master's
            ``retention_policy.log_retention_days`` when the experiment gives none.
    """

    log_retention_days: int = Field(default=-1, ge=-1, le=32767)


class ExperimentConfig(_Strict):
    """A validated, frozen experiment config.

    Build it with :func:`parse_experiment_config` (or ``model_validate``). Fields and
    defaults follow Determined 0.38 (reference §1); lengths are :class:`Length`.
    """

    name: str | None = None
    description: str | None = None
    entrypoint: str | list[str] | None = None
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    searcher: SearcherConfig
    checkpoint_storage: CheckpointStorageConfig | None = None
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    records_per_epoch: int = Field(default=0, ge=0)
    min_validation_period: Length = Length(batches=0)
    min_checkpoint_period: Length = Length(batches=0)
    perform_initial_validation: bool = False
    scheduling_unit: int = Field(default=100, ge=1)
    max_restarts: int = Field(default=5, ge=0)
    reproducibility: ReproducibilityConfig = ReproducibilityConfig()
    resources: ResourcesConfig = ResourcesConfig()
    environment: EnvironmentConfig = EnvironmentConfig()
    bind_mounts: list[BindMount] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    labels: list[str] = Field(default_factory=list)
    debug: bool = False
    log_policies: list[LogPolicy] = Field(default_factory=list)
    preemption_timeout: int | None = Field(default=None, ge=0)
    optimizations: dict[str, Any] = Field(default_factory=dict)
    profiling: ProfilingConfig = ProfilingConfig()
    workspace: str = ""
    project: str = ""
    retention_policy: ExperimentRetentionPolicy | None = None
    # Accepted for Determined compatibility; see _fields.FIELD_RULES for what each does
    # (warned about at create: Determined ignores them, or they apply to other clusters).
    tensorboard_storage: dict[str, Any] | None = None
    security: dict[str, Any] | None = None
    data_layer: dict[str, Any] | None = None
    internal: dict[str, Any] | None = None
    integrations: dict[str, Any] | None = None
    pbs: dict[str, Any] | None = None
    slurm: dict[str, Any] | None = None

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _parse_hps(cls, v: Any) -> dict[str, Hyperparameter]:
        return parse_hyperparameters(v)

    @field_validator("integrations")
    @classmethod
    def _webhooks(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """``integrations.webhooks`` (reference §6.3): ``exclude`` (bool: no webhook
        fires for this experiment), ``webhook_id`` (ids) and ``webhook_name`` (names)
        of the ``WEBHOOK_MODE_SPECIFIC`` webhooks (and custom alerts) it sends to."""
        hooks = (v or {}).get("webhooks")
        if hooks is None:
            return v
        if not isinstance(hooks, dict):
            raise ValueError("webhooks: a mapping of exclude, webhook_id, webhook_name")
        unknown = sorted(set(hooks) - {"exclude", "webhook_id", "webhook_name"})
        if unknown:
            raise ValueError(
                f"webhooks.{unknown[0]}: unknown; use exclude, webhook_id or webhook_name"
            )
        if not isinstance(hooks.get("exclude", False), bool):
            raise ValueError("webhooks.exclude: true or false")
        ids = hooks.get("webhook_id") or []
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids
        ):
            raise ValueError("webhooks.webhook_id: a list of webhook ids")
        names = hooks.get("webhook_name") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("webhooks.webhook_name: a list of webhook names")
        return v

    @field_serializer("hyperparameters")
    def _dump_hps(self, v: dict[str, Hyperparameter]) -> dict[str, Any]:
        return dump_hyperparameters(v)

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, str) and not v.strip():
            raise ValueError("entrypoint must not be empty")
        if isinstance(v, list) and not v:
            raise ValueError("entrypoint must not be an empty list")
        return v

    @model_validator(mode="after")
    def _cross_field(self) -> ExperimentConfig:
        gbs = self.hyperparameters.get("global_batch_size")
        if gbs is not None and not _is_int_hp(gbs):
            raise ValueError(
                "hyperparameters.global_batch_size must be a positive int (const, int or "
                "categorical of ints)"
            )
        if self.is_trial_class() and gbs is None:
            raise ValueError(
                "hyperparameters.global_batch_size is required for a trial-class "
                f"entrypoint ({self.entrypoint}); it sets the per-slot batch size"
            )
        lengths = {
            "min_validation_period": self.min_validation_period,
            "min_checkpoint_period": self.min_checkpoint_period,
        }
        max_length = getattr(self.searcher, "max_length", None)
        if max_length is not None:
            lengths["searcher.max_length"] = max_length
        if isinstance(self.searcher, PBTSearcher):
            lengths["searcher.length_per_round"] = self.searcher.length_per_round
        for field, length in lengths.items():
            if length.unit.value != "batches" and gbs is None:
                raise ValueError(
                    f"{field} in {length.unit.value} needs hyperparameters.global_batch_size"
                )
            if length.unit.value == "epochs" and self.records_per_epoch <= 0:
                raise ValueError(f"{field} in epochs needs records_per_epoch > 0")
        if isinstance(
            self.searcher, (SingleSearcher, RandomSearcher, GridSearcher, _ModelSearcher)
        ):
            if max_length is not None and max_length.value <= 0:
                raise ValueError("searcher.max_length must be greater than 0")
        return self

    def is_trial_class(self) -> bool:
        """True when the entrypoint names a trial class (``module:Class``)."""
        return isinstance(self.entrypoint, str) and bool(ENTRYPOINT_CLASS_RE.match(self.entrypoint))

    def to_json(self) -> dict[str, Any]:
        """The config as JSON-ready data, defaults included."""
        return self.model_dump(mode="json")


def _is_int_hp(hp: Any) -> bool:
    if isinstance(hp, ConstHP):
        return isinstance(hp.val, int) and not isinstance(hp.val, bool) and hp.val > 0
    if isinstance(hp, IntHP):
        return hp.minval > 0
    if isinstance(hp, CategoricalHP):
        return all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in hp.vals)
    return False


class ConfigError(ValueError):
    """An experiment config is invalid.

    Attributes:
        errors: list of ``(field_path, message)``; ``str(err)`` joins them one a line.
    """

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in errors))


def _format_validation_error(exc: ValidationError) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        # Drop the union tag pydantic inserts ("searcher.single.max_length").
        if (
            loc[:1] == ["searcher"]
            and len(loc) > 1
            and loc[1]
            in (
                "single",
                "random",
                "grid",
                "adaptive_asha",
                "async_halving",
                *MODEL_SEARCHERS,
                "pbt",
                "custom",
            )
        ):
            loc.pop(1)
        if (
            loc[:1] == ["checkpoint_storage"]
            and len(loc) > 1
            and loc[1]
            in (
                "shared_fs",
                "directory",
                "s3",
                "gcs",
                "azure",
            )
        ):
            loc.pop(1)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (not part of the experiment config schema)"
        elif err["type"] == "union_tag_invalid" and err.get("ctx", {}).get("tag") in (
            REMOVED_SEARCHERS
        ):
            msg = REMOVED_SEARCHERS[err["ctx"]["tag"]]
        elif err["type"] == "union_tag_invalid":
            ctx = err.get("ctx", {})
            msg = (
                f"unsupported {ctx.get('discriminator', 'type')} "
                f"{ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
            )
        elif err["type"] == "union_tag_not_found":
            msg = f"missing {err.get('ctx', {}).get('discriminator', 'type')}"
        out.append((".".join(loc), msg))
    return out


def parse_experiment_config(raw: Any) -> ExperimentConfig:
    """Validate a raw experiment config.

    Args:
        raw: a mapping (parsed YAML/JSON), or YAML text.

    Returns:
        The frozen config, defaults filled in.

    Raises:
        ConfigError: with one ``(field_path, message)`` per problem, for example
            ``("searcher.max_length", "Field required")`` or
            ``("hyperparameters.lr.minval", "minval (1.0) must be less than ...")``;
            also text or a mapping over the limits of :mod:`dauntless.config._limits`
            (size, nesting, expanded aliases, integers beyond 64 bits), naming the field.
    """
    try:
        if isinstance(raw, (str, bytes)):
            raw = load_yaml(raw)  # bounded: dauntless.config._limits
        else:
            check_tree(raw)
    except LimitError as exc:
        raise ConfigError(exc.errors) from None
    if not isinstance(raw, dict):
        raise ConfigError([("", f"the config must be a mapping, got {type(raw).__name__}")])
    try:
        return ExperimentConfig.model_validate(raw)
    except HyperparameterError as exc:
        raise ConfigError([(exc.path, exc.detail)]) from None
    except ValidationError as exc:
        errors = []
        for path, msg in _format_validation_error(exc):
            if path == "hyperparameters" and ": " in msg and msg.startswith("hyperparameters"):
                p, m = msg.split(": ", 1)
                errors.append((p, m))
            else:
                errors.append((path, msg))
        raise ConfigError(errors) from None
