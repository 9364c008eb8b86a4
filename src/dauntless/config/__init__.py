"""Experiment, master and agent configuration: validated, frozen pydantic models.

Pure: no I/O beyond parsing text handed in.

The experiment config's modules are imported with the package; the master's and the
agent's (``_cluster``, ``_provider``, ``_sso``, ``_identity``, ``_det_master``,
``_det_agent``) at the first use of one of their names (PEP 562 ``__getattr__``): a
``det experiment create`` validates only the experiment config, and importing the
cluster models cost it about 30 ms of its 0.35 s of CPU (issue 37, create -> first
metric).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._experiment import (
    MODEL_SEARCHERS,
    PROFILER_BUCKET_SECONDS,
    PROFILING_GROUPS,
    REMOVED_SEARCHERS,
    SAMPLER_OPTIONS,
    AdaptiveASHASearcher,
    AsyncHalvingSearcher,
    AzureStorage,
    CheckpointStorageConfig,
    CmaEsSearcher,
    ConfigError,
    CustomSearcher,
    DirectoryStorage,
    EnvironmentConfig,
    ExperimentConfig,
    ExploreFunction,
    GCSStorage,
    GPSearcher,
    GridSearcher,
    NSGAIISearcher,
    PBTSearcher,
    ProfilingConfig,
    RandomSearcher,
    ReplaceFunction,
    ResourcesConfig,
    S3Storage,
    SearcherConfig,
    SearchMetric,
    SharedFSStorage,
    SingleSearcher,
    TPESearcher,
    parse_experiment_config,
    parse_size,
    searcher_length,
)
from ._fields import FIELD_RULES, FieldRule, config_refusals, config_warnings
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
from ._limits import (
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    MAX_NODES,
    MAX_TEXT_BYTES,
    LimitError,
    check_tree,
    load_json,
    load_yaml,
    load_yaml_file,
    within_limits,
)
from ._merge import merge_template

if TYPE_CHECKING:
    from ._cluster import (
        AgentConfig,
        AgentPolicyConfig,
        AuthzConfig,
        CustomSearchersConfig,
        MasterConfig,
        ResourcePoolConfig,
        SecurityConfig,
        TaskProxyConfig,
        TLSConfig,
        TokenConfig,
        WebhooksConfig,
    )
    from ._det_agent import env_agent_config, translate_agent_config
    from ._det_master import RefusedField, translate_master_config
    from ._identity import (
        AgentUserGroup,
        DefaultTaskConfig,
        TaskIdentity,
        agent_refusal,
        resolve_task_identity,
    )
    from ._provider import (
        AgentResourceManagerConfig,
        AWSProviderConfig,
        GCPProviderConfig,
        LocalProviderConfig,
        SlurmResourceManagerConfig,
        parse_duration,
    )
    from ._sso import (
        INFINITE_LIFESPAN_DAYS,
        AuditConfig,
        OIDCConfig,
        parse_go_duration,
    )

_LAZY = {
    "AgentConfig": "_cluster",
    "AgentPolicyConfig": "_cluster",
    "AuthzConfig": "_cluster",
    "CustomSearchersConfig": "_cluster",
    "MasterConfig": "_cluster",
    "ResourcePoolConfig": "_cluster",
    "SecurityConfig": "_cluster",
    "TaskProxyConfig": "_cluster",
    "TLSConfig": "_cluster",
    "TokenConfig": "_cluster",
    "WebhooksConfig": "_cluster",
    "env_agent_config": "_det_agent",
    "translate_agent_config": "_det_agent",
    "RefusedField": "_det_master",
    "translate_master_config": "_det_master",
    "AgentUserGroup": "_identity",
    "DefaultTaskConfig": "_identity",
    "TaskIdentity": "_identity",
    "agent_refusal": "_identity",
    "resolve_task_identity": "_identity",
    "AgentResourceManagerConfig": "_provider",
    "AWSProviderConfig": "_provider",
    "GCPProviderConfig": "_provider",
    "LocalProviderConfig": "_provider",
    "SlurmResourceManagerConfig": "_provider",
    "parse_duration": "_provider",
    "INFINITE_LIFESPAN_DAYS": "_sso",
    "AuditConfig": "_sso",
    "OIDCConfig": "_sso",
    "parse_go_duration": "_sso",
}
"""Names imported at first use -> the module that defines them."""

__all__ = [
    "parse_size",
    "PROFILER_BUCKET_SECONDS",
    "PROFILING_GROUPS",
    "ProfilingConfig",
    "merge_template",
    "WebhooksConfig",
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_TEXT_BYTES",
    "LimitError",
    "RefusedField",
    "translate_master_config",
    "translate_agent_config",
    "env_agent_config",
    "check_tree",
    "within_limits",
    "load_json",
    "load_yaml",
    "load_yaml_file",
    "INFINITE_LIFESPAN_DAYS",
    "AuditConfig",
    "OIDCConfig",
    "parse_go_duration",
    "AgentPolicyConfig",
    "AgentUserGroup",
    "DefaultTaskConfig",
    "TaskIdentity",
    "agent_refusal",
    "resolve_task_identity",
    "FIELD_RULES",
    "MODEL_SEARCHERS",
    "REMOVED_SEARCHERS",
    "SAMPLER_OPTIONS",
    "CmaEsSearcher",
    "CustomSearchersConfig",
    "CustomSearcher",
    "ExploreFunction",
    "GPSearcher",
    "NSGAIISearcher",
    "PBTSearcher",
    "ReplaceFunction",
    "SearchMetric",
    "TPESearcher",
    "AWSProviderConfig",
    "AgentResourceManagerConfig",
    "GCPProviderConfig",
    "LocalProviderConfig",
    "SlurmResourceManagerConfig",
    "parse_duration",
    "AdaptiveASHASearcher",
    "AsyncHalvingSearcher",
    "FieldRule",
    "config_refusals",
    "config_warnings",
    "searcher_length",
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
    "AuthzConfig",
    "RandomSearcher",
    "ResourcePoolConfig",
    "ResourcesConfig",
    "S3Storage",
    "GCSStorage",
    "AzureStorage",
    "SearcherConfig",
    "SecurityConfig",
    "TaskProxyConfig",
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


def __getattr__(name: str) -> Any:
    """Import a master or agent config name at its first use (see the module)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
