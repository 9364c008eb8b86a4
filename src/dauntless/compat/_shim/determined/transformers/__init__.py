"""``determined.transformers``: :mod:`dauntless.integrations.transformers` (needs
``dauntless[transformers]``)."""

from dauntless.integrations.transformers import (  # noqa: F401
    DetCallback,
    get_ds_config_path_from_args,
)

__all__ = ["DetCallback", "get_ds_config_path_from_args"]
