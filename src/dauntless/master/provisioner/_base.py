"""What every provider offers the provisioner loop (:mod:`._loop`)."""

from __future__ import annotations

import abc


class ProviderError(RuntimeError):
    """A provider call failed (the cloud refused, the process could not start)."""


class Provider(abc.ABC):
    """Starts and stops the instances of one resource pool.

    Instances are named by the master (the name is also the agent id their agent
    registers with); providers tag or label them with that name and the cluster, so
    that :meth:`find` can recognise them after a master restart.
    """

    kind: str = ""

    @abc.abstractmethod
    def launch(self, name: str) -> str:
        """Start one instance whose agent registers as ``name``.

        Returns:
            The provider's id of the instance (process id, EC2 instance id, GCP name).

        Raises:
            ProviderError: it could not be started.
        """

    @abc.abstractmethod
    def terminate(self, name: str, provider_id: str | None) -> None:
        """Stop an instance for good; stopping one that is already gone is no error.

        Raises:
            ProviderError: the provider refused.
        """

    @abc.abstractmethod
    def find(self, name: str) -> str | None:
        """The provider id of the live instance named ``name``, or None when there is
        none (used after a master restart for launches whose outcome was not recorded).

        Raises:
            ProviderError: the provider could not be asked.
        """
