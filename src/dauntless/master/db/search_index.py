"""ORM models of the experiment search index (issue 31 scope 7, issue 37 scope 5;
migration ``0022_experiment_search``): one row per hyperparameter of an experiment's
representative trial and one per label, so that ``GET /api/v1/experiments`` filters and
sorts by them through an index instead of decoding every experiment's JSON config.

Index design: a hyperparameter filter is ``name = ? AND num_value BETWEEN ? AND ?``
(or ``text_value = ?``), answered by the ``(name, num_value, experiment_id)`` and
``(name, text_value, experiment_id)`` indexes without reading the table; a best-metric
filter is ``searcher_metric = ? AND best_searcher_metric BETWEEN ? AND ?`` on
``experiments`` (``ix_experiments_metric_best``). The planner intersects them through
``experiment_id IN (...)`` semi-joins, so a range filter over 10,000 experiments reads only
the matching index entries (``benchmarks/experiment_search.py``).
"""

from __future__ import annotations

from sqlalchemy import Float, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base

MAX_HPARAM_NAME = 255
"""The longest hyperparameter name (a dotted path of nested names) indexed, in characters."""
MAX_HPARAM_TEXT = 255
"""The longest text value indexed, in characters (longer ones are cut to this)."""


class ExperimentHparamRow(Base):
    """One hyperparameter of an experiment's representative trial (its best trial by the
    searcher metric, else its first trial): a number in ``num_value`` (ints and floats),
    anything else as text in ``text_value`` (``true``/``false`` for booleans, JSON for
    lists). Nested hyperparameters are flattened to dotted names (``optimizer.lr``)."""

    __tablename__ = "experiment_hparams"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(MAX_HPARAM_NAME), primary_key=True)
    num_value: Mapped[float | None] = mapped_column(Float, nullable=True)
    text_value: Mapped[str | None] = mapped_column(String(MAX_HPARAM_TEXT), nullable=True)


Index(
    "ix_experiment_hparams_num",
    ExperimentHparamRow.name,
    ExperimentHparamRow.num_value,
    ExperimentHparamRow.experiment_id,
)
Index(
    "ix_experiment_hparams_text",
    ExperimentHparamRow.name,
    ExperimentHparamRow.text_value,
    ExperimentHparamRow.experiment_id,
)


class ExperimentLabelRow(Base):
    """One label of an experiment (the config's ``labels``, kept in step by the label
    and create model functions)."""

    __tablename__ = "experiment_labels"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    label: Mapped[str] = mapped_column(String(255), primary_key=True)


Index("ix_experiment_labels_label", ExperimentLabelRow.label, ExperimentLabelRow.experiment_id)

__all__ = ["MAX_HPARAM_NAME", "MAX_HPARAM_TEXT", "ExperimentHparamRow", "ExperimentLabelRow"]
