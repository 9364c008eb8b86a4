"""Experiment, master and agent configuration: validated, frozen pydantic models.

Pure: no I/O beyond parsing text handed in.
"""

from ._cluster import (
    AgentConfig,
    MasterConfig,
    ResourcePoolConfig,
    SecurityConfig,
    TLSConfig,
    TokenConfig,
)
from ._experiment import (
    AdaptiveASHASearcher,
    CheckpointStorageConfig,
    ConfigError,
    DirectoryStorage,
    EnvironmentConfig,
    ExperimentConfig,
    GridSearcher,
    RandomSearcher,
    ResourcesConfig,
    S3Storage,
    SearcherConfig,
    SharedFSStorage,
    SingleSearcher,
    parse_experiment_config,
)
from ._hparams import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    Hyperparameter,
    HyperparameterError,
    IntHP,
    LogHP,
    const_values,
    dump_hyperparameters,
    parse_hyperparameters,
)
from ._length import Length, Unit, records_to_batches

__all__ = [
    "AdaptiveASHASearcher",
    "AgentConfig",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHP",
    "DirectoryStorage",
    "DoubleHP",
    "EnvironmentConfig",
    "ExperimentConfig",
    "GridSearcher",
    "Hyperparameter",
    "HyperparameterError",
    "IntHP",
    "Length",
    "LogHP",
    "MasterConfig",
    "RandomSearcher",
    "ResourcePoolConfig",
    "ResourcesConfig",
    "S3Storage",
    "SearcherConfig",
    "SecurityConfig",
    "SharedFSStorage",
    "SingleSearcher",
    "TLSConfig",
    "TokenConfig",
    "Unit",
    "const_values",
    "dump_hyperparameters",
    "parse_experiment_config",
    "parse_hyperparameters",
    "records_to_batches",
]
