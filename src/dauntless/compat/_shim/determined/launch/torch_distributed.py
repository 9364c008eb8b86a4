"""``python -m determined.launch.torch_distributed``: runs
:mod:`dauntless.launch.torch_distributed`."""

from dauntless.launch.torch_distributed import launch, main, parse_args  # noqa: F401

if __name__ == "__main__":
    main()
