"""Framework integrations: thin adapters from a framework's training events to the Core
API (metrics, checkpoints, preemption, the searcher).

Each module imports its framework, so each is imported only by the code that uses it
(``import dauntless`` stays lean) and needs its optional extra:

- :mod:`dauntless.integrations.lightning`: ``DeterminedCallback`` for Lightning 2.x
  (``pip install 'dauntless[lightning]'``);
- :mod:`dauntless.integrations.transformers`: ``DetCallback`` for the Hugging Face
  ``transformers.Trainer`` (``[transformers]``);
- :mod:`dauntless.integrations.keras`: ``DeterminedCallback`` for Keras 3 (``[keras]``).

The same classes answer Determined's import paths (``determined.keras``,
``determined.transformers``, ``determined.lightning``) through :mod:`dauntless.compat`.
"""
