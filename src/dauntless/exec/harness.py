"""The trial harness: ``python -m dauntless.exec.harness``.

The agent starts it in the task's work dir (the unpacked context directory) with the
``DET_*`` environment of docs/protocol.md. It seeds ``random``, ``numpy`` and ``torch``
with the trial seed, imports the entrypoint class (``module:Class``, the module found in
the work dir), builds the trial, resumes from ``DET_LATEST_CHECKPOINT`` if set, and runs
the training loop against the master until the searcher closes the trial (exit 0), the
trial is preempted (checkpoint, exit 0), or an error occurs (exit 1, the error on
stderr).

A trial with ``resources.slots_per_trial`` N > 1 runs as N harness processes, one per
slot, started by :mod:`dauntless.launch.torch_distributed` with torch.distributed's
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``... variables: each joins the process group (NCCL
on CUDA, gloo otherwise) and trains its shard; rank 0 is the chief that talks to the
master. When one rank fails the launcher stops the others, and the master restarts the
whole trial from its latest checkpoint.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback
from collections.abc import Mapping

import torch

import dauntless
from dauntless.config import ConfigError, parse_experiment_config
from dauntless.core import ClusterInfo, Context, EarlyExitReason, Session
from dauntless.pytorch import PyTorchTrialContext
from dauntless.pytorch._controller import _TrialController
from dauntless.pytorch._distributed import destroy_process_group, init_process_group_from_env
from dauntless.pytorch._import import EntrypointError, load_trial_class
from dauntless.pytorch._state import seed_all

LOG_FORMAT = dauntless.LOG_FORMAT
logger = logging.getLogger("dauntless.exec.harness")

__all__ = ["LOG_FORMAT", "load_trial_class", "main", "run_trial"]


def run_trial(
    info: ClusterInfo,
    *,
    session: Session | None = None,
    preempt_poll_seconds: float = 60.0,
    trial_spec: str | None = None,
) -> int:
    """Run one trial task to its end.

    The model definition is imported from, and copied into each checkpoint's ``code/``
    from, the working directory (the agent's unpacked context directory).

    Args:
        info: the task's cluster info (must describe a trial).
        session: the master session; a new one to ``info.master_url`` when None.
        preempt_poll_seconds: seconds each long poll of the preemption signal waits.
        trial_spec: the trial class as ``module:Class`` (the launcher's ``--trial``);
            the experiment's ``entrypoint`` when None.

    Returns:
        The process exit code: 0 when the trial finished, was preempted or reported
        invalid hyperparameters.

    Raises:
        ValueError: if ``resources.slots_per_trial`` > 1 but the process was not started
            as one of that many ranks (see :func:`init_process_group_from_env`).
        Any error of the trial code, the config, the storage or the master (the caller
        turns it into exit code 1).
    """
    trial_info = info.trial
    if trial_info is None:
        raise ValueError(f"DET_TASK_TYPE is {info.task_type!r}; the harness runs TRIAL tasks")
    config = parse_experiment_config(trial_info.config)
    if trial_spec is not None:
        config = config.model_copy(update={"entrypoint": trial_spec})
    if not config.is_trial_class():
        raise ValueError(
            f"the experiment entrypoint {config.entrypoint!r} does not name a trial class "
            "(module:Class); the agent runs other entrypoints directly"
        )
    # Every rank has the same seed: the ranks start from the same weights (DDP also
    # broadcasts the chief's) and a resumed trial can redraw each rank's streams.
    seed_all(trial_info.trial_seed)
    trial_cls = load_trial_class(str(config.entrypoint))
    distributed, started = init_process_group_from_env(config.resources.slots_per_trial)
    logger.info(
        "dauntless %s harness: trial %d, experiment %d, run %d, entrypoint %s, rank %d of %d",
        dauntless.__version__,
        trial_info.trial_id,
        trial_info.experiment_id,
        trial_info.trial_run_id,
        config.entrypoint,
        distributed.rank,
        distributed.size,
    )
    models: list[torch.nn.Module] = []
    try:
        with Context.from_cluster_info(
            info,
            session=session,
            distributed=distributed,
            preempt_poll_seconds=preempt_poll_seconds,
            experiment_config=config,
        ) as core:
            # A DeepSpeedTrial's module imported dauntless.pytorch.deepspeed already;
            # other trials do not import it (nor deepspeed).
            ds = sys.modules.get("dauntless.pytorch.deepspeed")
            controller_cls: type[_TrialController] = _TrialController
            if ds is not None and issubclass(trial_cls, ds.DeepSpeedTrial):
                from dauntless.pytorch.deepspeed._controller import _DeepSpeedController
                from dauntless.pytorch.deepspeed._trainer import init_deepspeed_comm

                init_deepspeed_comm()
                context = ds.DeepSpeedTrialContext(trial_info, core=core)
                controller_cls = _DeepSpeedController
            else:
                context = PyTorchTrialContext(trial_info, core=core)
            models = context.models
            try:
                trial = trial_cls(context)
            except dauntless.InvalidHP as exc:
                logger.info("the trial rejected its hyperparameters: %s", exc)
                if distributed.is_chief:
                    core.train.report_early_exit(EarlyExitReason.INVALID_HP)
                return 0
            result = controller_cls(trial, context, core, code_dir=os.getcwd()).run()
    finally:
        destroy_process_group(distributed, started, models)
    logger.info("trial %d exits: %s", trial_info.trial_id, result.value)
    return 0


def main(
    environ: Mapping[str, str] | None = None,
    *,
    session: Session | None = None,
    preempt_poll_seconds: float = 60.0,
    trial_spec: str | None = None,
) -> int:
    """Run the harness; returns the exit code (0 done or preempted, 1 on error).

    Args:
        environ: the environment to read ``DET_*`` from; ``os.environ`` when None.
        session: the master session; one to ``DET_MASTER`` when None.
        preempt_poll_seconds: seconds each long poll of the preemption signal waits.
        trial_spec: ``module:Class`` to train instead of the config's entrypoint.
    """
    try:
        info = ClusterInfo.from_env(environ)
        if info is None:
            raise ValueError(
                "DET_MASTER is not set: the harness runs inside a trial task started by a "
                "Dauntless agent"
            )
        return run_trial(
            info,
            session=session,
            preempt_poll_seconds=preempt_poll_seconds,
            trial_spec=trial_spec,
        )
    except Exception as exc:  # the process boundary: report any error and exit non-zero
        report_error(exc)
        return 1


def report_error(exc: BaseException) -> None:
    """Print why the harness fails to stderr: the one-line cause first; then, unless it
    is a config mistake (:class:`EntrypointError`, ``ConfigError``), the traceback
    without the frames of Dauntless's own code and of the import machinery, so that
    what remains points into the model definition."""
    print(f"harness error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if isinstance(exc, (EntrypointError, ConfigError)):
        return
    ours = (
        os.path.dirname(os.path.abspath(dauntless.__file__)) + os.sep,
        os.path.dirname(os.path.abspath(importlib.__file__)) + os.sep,
    )
    te = traceback.TracebackException.from_exception(exc)
    for part in (te, *_causes(te)):
        part.stack = traceback.StackSummary.from_list(
            [
                f
                for f in part.stack
                if not os.path.abspath(f.filename).startswith(ours)
                and not f.filename.startswith("<frozen importlib")
            ]
        )
    print("".join(te.format()), end="", file=sys.stderr, flush=True)


def _causes(te: traceback.TracebackException) -> list[traceback.TracebackException]:
    out: list[traceback.TracebackException] = []
    while True:
        nxt = te.__cause__ or (None if te.__suppress_context__ else te.__context__)
        if nxt is None:
            return out
        out.append(nxt)
        te = nxt


if __name__ == "__main__":
    # Lines must reach the agent as they are written, not when a pipe buffer fills.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    if hasattr(sys.stderr, "reconfigure"):
        sys.stderr.reconfigure(line_buffering=True)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=LOG_FORMAT)
    # One line per HTTP request would drown the trial's own log lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    spec = None
    if sys.argv[1:2] == ["--trial"] and len(sys.argv) == 3:
        spec = sys.argv[2]
    elif len(sys.argv) > 1:
        print("usage: python -m dauntless.exec.harness [--trial module:Class]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(trial_spec=spec))
