"""``python -m determined.launch.deepspeed``: runs :mod:`dauntless.launch.deepspeed`."""

from dauntless.launch.deepspeed import main, parse_args  # noqa: F401

if __name__ == "__main__":
    main()
