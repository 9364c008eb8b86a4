"""A typed Python client (SDK) for the Dauntless master's REST API.

    from dauntless.client import Session, build_context_tarball

    with Session("127.0.0.1:8080") as s:
        exp = s.create_experiment(open("const.yaml").read(), build_context_tarball("."))
        print(s.get_experiment(exp["id"])["trials"])

Routes and objects follow docs/protocol.md. The session signs in on its own (a saved
token, ``DET_USER_TOKEN``, ``DET_USER``/``DET_PASS``, else the built-in ``determined`` user
with an empty password; see :class:`Session`) and verifies an HTTPS master with
``cert_file`` / ``DET_MASTER_CERT_FILE`` when given.
"""

from ._archive import SkippedEntry, extract_archive
from ._auth import DEFAULT_USER, TokenStore, default_store_path
from ._context import (
    BUILTIN_IGNORES,
    IGNORE_FILE,
    MAX_CONTEXT_BYTES,
    ContextEntry,
    build_context_tarball,
    list_context_entries,
    list_context_files,
)
from ._errors import (
    APIError,
    AuthenticationError,
    ClientError,
    ContextError,
    ContextTooLargeError,
    MasterUnreachableError,
)
from ._follow import experiment_done_checker, follow_trial_logs, wait_for_first_trial
from ._registry import Registry
from ._session import Session
from ._types import (
    TERMINAL_EXPERIMENT_STATES,
    TERMINAL_TRIAL_STATES,
    Agent,
    Checkpoint,
    Experiment,
    ExperimentDetail,
    ExperimentPage,
    LogLine,
    MasterInfo,
    Metric,
    Slot,
    Trial,
    TrialLogs,
    User,
)
from ._url import DEFAULT_MASTER_URL, normalize_master_url, resolve_master_url

__all__ = [
    "Registry",
    "SkippedEntry",
    "extract_archive",
    "APIError",
    "Agent",
    "AuthenticationError",
    "BUILTIN_IGNORES",
    "Checkpoint",
    "ClientError",
    "ContextEntry",
    "ContextError",
    "ContextTooLargeError",
    "DEFAULT_MASTER_URL",
    "DEFAULT_USER",
    "Experiment",
    "ExperimentDetail",
    "ExperimentPage",
    "IGNORE_FILE",
    "LogLine",
    "MAX_CONTEXT_BYTES",
    "MasterInfo",
    "MasterUnreachableError",
    "Metric",
    "Session",
    "Slot",
    "TERMINAL_EXPERIMENT_STATES",
    "TERMINAL_TRIAL_STATES",
    "TokenStore",
    "Trial",
    "TrialLogs",
    "User",
    "build_context_tarball",
    "default_store_path",
    "experiment_done_checker",
    "follow_trial_logs",
    "list_context_entries",
    "list_context_files",
    "normalize_master_url",
    "resolve_master_url",
    "wait_for_first_trial",
]
