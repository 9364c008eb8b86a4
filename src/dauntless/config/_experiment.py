"""The experiment config: pydantic models with Determined's field names and defaults.

Source of names and defaults: Determined's expconf v0 schema (reference §1). Unknown
fields are rejected everywhere; :func:`parse_experiment_config` turns a raw mapping (the
YAML a user wrote) into a frozen :class:`ExperimentConfig`, or raises
:class:`ConfigError` whose message names each bad field path and what was expected.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

import yaml
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

ENTRYPOINT_CLASS_RE = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_.]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------- searcher


class _SearcherBase(_Strict):
    metric: str = Field(min_length=1)
    smaller_is_better: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None


class SingleSearcher(_SearcherBase):
    """One trial, trained for ``max_length``."""

    name: Literal["single"]
    max_length: Length


class RandomSearcher(_SearcherBase):
    """``max_trials`` trials with hyperparameters sampled at random."""

    name: Literal["random"]
    max_length: Length
    max_trials: int = Field(ge=1)
    max_concurrent_trials: int = Field(default=16, ge=0)


class GridSearcher(_SearcherBase):
    """The cartesian product of every hyperparameter's grid axis."""

    name: Literal["grid"]
    max_length: Length
    max_concurrent_trials: int = Field(default=16, ge=0)


class AdaptiveASHASearcher(_SearcherBase):
    """Asynchronous successive halving (Li et al., MLSys 2020) over several brackets."""

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

    @model_validator(mode="after")
    def _length_or_time(self) -> AdaptiveASHASearcher:
        if self.max_length is None and self.max_time is None:
            raise ValueError("adaptive_asha needs max_length, or max_time with time_metric")
        if (self.max_time is None) != (self.time_metric is None):
            raise ValueError("max_time and time_metric must be given together")
        return self


SearcherConfig = Annotated[
    Union[SingleSearcher, RandomSearcher, GridSearcher, AdaptiveASHASearcher],
    Field(discriminator="name"),
]


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


class S3Storage(_StorageBase):
    """Checkpoints in an S3 bucket (implemented by a later issue)."""

    type: Literal["s3"]
    bucket: str = Field(min_length=1)
    prefix: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None

    @field_validator("prefix")
    @classmethod
    def _no_dotdot(cls, v: str | None) -> str | None:
        if v is not None and ".." in v.split("/"):
            raise ValueError("prefix must not contain '..'")
        return v


CheckpointStorageConfig = Annotated[
    Union[SharedFSStorage, DirectoryStorage, S3Storage], Field(discriminator="type")
]


# ---------------------------------------------------------------------------- the rest


class ResourcesConfig(_Strict):
    """``resources``: slots, pool and scheduling knobs of every trial."""

    slots_per_trial: int = Field(default=1, ge=0)
    resource_pool: str = ""
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float = Field(default=1.0, gt=0)
    max_slots: int | None = Field(default=None, ge=0)
    shm_size: int | str | None = None
    devices: list[Any] = Field(default_factory=list)
    is_single_node: bool | None = None
    agent_label: str | None = None
    native_parallel: bool = False


class EnvironmentConfig(_Strict):
    """``environment``: what a task's process sees.

    ``image`` and the container fields are accepted so that Determined configs parse; the
    plain-process runtime ignores them.
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
        """The variables as a dict, for a slot type (``cpu``, ``cuda``, ``rocm``)."""
        v = self.environment_variables
        items = v.get(device, []) if isinstance(v, dict) else v
        return dict(item.split("=", 1) for item in items)


class BindMount(_Strict):
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


class ReproducibilityConfig(_Strict):
    """``reproducibility.experiment_seed``: 0..2**31-1; the master picks one if absent."""

    experiment_seed: int | None = Field(default=None, ge=0, le=2**31 - 1)


class LogPolicy(_Strict):
    name: str | None = None
    pattern: str | None = None
    action: Any = None


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
    profiling: dict[str, Any] = Field(default_factory=dict)
    workspace: str = ""
    project: str = ""
    retention_policy: dict[str, Any] | None = None

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _parse_hps(cls, v: Any) -> dict[str, Hyperparameter]:
        return parse_hyperparameters(v)

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
        for field, length in lengths.items():
            if length.unit.value != "batches" and gbs is None:
                raise ValueError(
                    f"{field} in {length.unit.value} needs hyperparameters.global_batch_size"
                )
            if length.unit.value == "epochs" and self.records_per_epoch <= 0:
                raise ValueError(f"{field} in epochs needs records_per_epoch > 0")
        if isinstance(self.searcher, (SingleSearcher, RandomSearcher, GridSearcher)):
            if self.searcher.max_length.value <= 0:
                raise ValueError("searcher.max_length must be greater than 0")
        return self

    def is_trial_class(self) -> bool:
        """True when the entrypoint names a trial class (``module:Class``)."""
        return isinstance(self.entrypoint, str) and bool(
            ENTRYPOINT_CLASS_RE.match(self.entrypoint)
        )

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
        if loc[:1] == ["searcher"] and len(loc) > 1 and loc[1] in (
            "single",
            "random",
            "grid",
            "adaptive_asha",
        ):
            loc.pop(1)
        if loc[:1] == ["checkpoint_storage"] and len(loc) > 1 and loc[1] in (
            "shared_fs",
            "directory",
            "s3",
        ):
            loc.pop(1)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (not part of the experiment config schema)"
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
            ``("hyperparameters.lr.minval", "minval (1.0) must be less than ...")``.
    """
    if isinstance(raw, (str, bytes)):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError([("", f"the config is not valid YAML: {exc}")]) from None
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
