"""``python -m dauntless.launch.deepspeed [OVERRIDES... --] (--trial SPEC | CMD...)``:
start one DeepSpeed worker per slot of this node, as Determined's
``determined.launch.deepspeed`` does (``determined.launch.deepspeed`` is this module
under the compatibility package).

DeepSpeed's own launcher (the ``deepspeed`` command) gives each rank the
torch.distributed ``env://`` variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) that ``deepspeed.init_distributed`` reads; on several
nodes it reaches the others with ``pdsh`` over ssh. This launcher gives the ranks the
same variables through the platform's own launcher
(:func:`dauntless.launch.torch_distributed.launch`): every node of the allocation runs
it, the chief publishes the rendezvous address through the master and each node starts
its local ranks itself, so no sshd, hostfile or ``pdsh`` is needed (Determined's
``DTRAIN_SSH_PORT`` sshd has no counterpart). Rank output is prefixed ``[rank=N]``, a
failed rank stops the others, and signals are forwarded, as there.

``--trial module:Class`` runs the harness with that trial class (a
:class:`dauntless.pytorch.deepspeed.DeepSpeedTrial`); otherwise ``CMD`` is a script that
uses ``dauntless.pytorch.deepspeed.init()`` (or Hugging Face's Trainer with
``--deepspeed``). ``OVERRIDES`` before ``--`` are options of the ``deepspeed`` command:
``--num_gpus N`` (``--num-gpus``) runs N workers on this node (at most its slots, one
node only); any other is refused with a message naming it, because the allocation sets
the layout.
"""

from __future__ import annotations

import sys

from .torch_distributed import launch
from .torch_distributed import parse_args as _torch_parse_args

USAGE = "usage: python -m dauntless.launch.deepspeed [[--num_gpus N] --] (--trial module:Class | CMD...)"


def parse_args(args: list[str]) -> tuple[int | None, list[str]]:
    """Split the command line into the worker count override and the worker argv.

    Args:
        args: the arguments after the module name.

    Returns:
        ``(num_gpus, cmd)``: the ``--num_gpus`` override (None when not given) and the
        argv each worker runs.

    Raises:
        SystemExit: an empty command, a malformed ``--num_gpus`` or another ``deepspeed``
            option (named).
    """
    if "--" not in args:
        return _torch_parse_args(args)
    split = args.index("--")
    overrides, rest = args[:split], args[split + 1 :]
    translated: list[str] = []
    i = 0
    while i < len(overrides):
        opt = overrides[i]
        name, eq, value = opt.partition("=")
        if name not in ("--num_gpus", "--num-gpus"):
            raise SystemExit(
                f"launcher: deepspeed option {opt!r} is not supported: the allocation sets "
                "the nodes, ranks and rendezvous; only --num_gpus may be overridden"
            )
        if not eq:
            if i + 1 >= len(overrides):
                raise SystemExit(f"launcher: {name} needs a value\n{USAGE}")
            value = overrides[i + 1]
            i += 1
        translated.append(f"--nproc_per_node={value}")
        i += 1
    return _torch_parse_args([*translated, "--", *rest])


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``[OVERRIDES... --] (--trial SPEC | CMD...)`` from the command line."""
    nproc, cmd = parse_args(list(sys.argv[1:] if argv is None else argv))
    raise SystemExit(launch(cmd, nproc))


if __name__ == "__main__":
    main()
