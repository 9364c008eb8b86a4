"""experiment search index

``experiments`` gains ``searcher_name``, ``searcher_metric``, ``smaller_is_better``
(copies of the config's searcher fields), ``best_searcher_metric`` (the best value of the
searcher metric its trials validated) and ``best_trial_id`` (its best trial, else its
first); new tables ``experiment_hparams`` (that trial's hyperparameters, flattened to
dotted names, one row each) and ``experiment_labels``. Indexes:
``ix_experiments_metric_best (searcher_metric, best_searcher_metric)``,
``ix_experiments_owner``, ``ix_experiments_start_time``, ``ix_experiments_searcher_name``,
``ix_experiment_hparams_num (name, num_value, experiment_id)``,
``ix_experiment_hparams_text (name, text_value, experiment_id)``,
``ix_experiment_labels_label (label, experiment_id)``. Existing experiments are indexed
here from their configs and trials.

Columns are added with plain ``ALTER TABLE ... ADD COLUMN`` (as 0015 does), never a batch
copy of ``experiments``.

Revision ID: 0022
Revises: 0014 (the head of this branch; the lead re-chains at merge)
Create Date: 2026-11-28 10:30:00.000000
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MAX = 255


def _flat(hp: Any, prefix: str = "") -> list[tuple[str, float | None, str | None]]:
    """The migration's own copy of ``models.experiment_index.hparam_rows`` (a migration
    does not import code that may change after it)."""
    out: list[tuple[str, float | None, str | None]] = []
    if not isinstance(hp, dict):
        return out
    for key in sorted(hp):
        name = f"{prefix}{key}"
        value = hp[key]
        if isinstance(value, dict) and value:
            out.extend(_flat(value, name + "."))
            continue
        if len(name) > _MAX:
            continue
        if isinstance(value, bool):
            out.append((name, None, "true" if value else "false"))
        elif isinstance(value, (int, float)):
            out.append((name, float(value), None))
        elif isinstance(value, str):
            out.append((name, None, value[:_MAX]))
        elif value is not None:
            out.append((name, None, json.dumps(value, sort_keys=True)[:_MAX]))
    return out


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def upgrade() -> None:
    op.add_column("experiments", sa.Column("searcher_name", sa.String(64), nullable=True))
    op.add_column("experiments", sa.Column("searcher_metric", sa.String(255), nullable=True))
    op.add_column(
        "experiments",
        sa.Column("smaller_is_better", sa.Boolean(), server_default=sa.true(), nullable=False),
    )
    op.add_column("experiments", sa.Column("best_searcher_metric", sa.Float(), nullable=True))
    op.add_column("experiments", sa.Column("best_trial_id", sa.Integer(), nullable=True))
    op.create_index("ix_experiments_searcher_name", "experiments", ["searcher_name"])
    op.create_index(
        "ix_experiments_metric_best", "experiments", ["searcher_metric", "best_searcher_metric"]
    )
    op.create_index("ix_experiments_owner", "experiments", ["owner"])
    op.create_index("ix_experiments_start_time", "experiments", ["start_time"])
    op.create_table(
        "experiment_hparams",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("num_value", sa.Float(), nullable=True),
        sa.Column("text_value", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "name"),
    )
    op.create_index(
        "ix_experiment_hparams_num", "experiment_hparams", ["name", "num_value", "experiment_id"]
    )
    op.create_index(
        "ix_experiment_hparams_text", "experiment_hparams", ["name", "text_value", "experiment_id"]
    )
    op.create_table(
        "experiment_labels",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("experiment_id", "label"),
    )
    op.create_index("ix_experiment_labels_label", "experiment_labels", ["label", "experiment_id"])
    _backfill()


def _backfill() -> None:
    bind = op.get_bind()
    exps = sa.table(
        "experiments",
        sa.column("id", sa.Integer),
        sa.column("config", sa.JSON),
        sa.column("searcher_name", sa.String),
        sa.column("searcher_metric", sa.String),
        sa.column("smaller_is_better", sa.Boolean),
        sa.column("best_searcher_metric", sa.Float),
        sa.column("best_trial_id", sa.Integer),
    )
    trials = sa.table(
        "trials",
        sa.column("id", sa.Integer),
        sa.column("experiment_id", sa.Integer),
        sa.column("hparams", sa.JSON),
        sa.column("best_validation", sa.Float),
    )
    hps = sa.table(
        "experiment_hparams",
        sa.column("experiment_id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("num_value", sa.Float),
        sa.column("text_value", sa.String),
    )
    labels = sa.table(
        "experiment_labels", sa.column("experiment_id", sa.Integer), sa.column("label", sa.String)
    )
    rows = bind.execute(sa.select(exps.c.id, exps.c.config)).all()
    for exp_id, raw in rows:
        config = _json(raw) or {}
        searcher = config.get("searcher") or {}
        smaller = bool(searcher.get("smaller_is_better", True))
        metric = searcher.get("metric")
        best_value, best_trial, best_hp = None, None, None
        for trial_id, hp, value in bind.execute(
            sa.select(trials.c.id, trials.c.hparams, trials.c.best_validation)
            .where(trials.c.experiment_id == exp_id)
            .order_by(trials.c.id)
        ):
            if best_trial is None:
                best_trial, best_hp = trial_id, hp
            if value is not None and (
                best_value is None or (value < best_value if smaller else value > best_value)
            ):
                best_value, best_trial, best_hp = value, trial_id, hp
        bind.execute(
            exps.update()
            .where(exps.c.id == exp_id)
            .values(
                searcher_name=str(searcher.get("name") or "")[:64] or None,
                searcher_metric=metric[:255] if isinstance(metric, str) else None,
                smaller_is_better=smaller,
                best_searcher_metric=best_value,
                best_trial_id=best_trial,
            )
        )
        flat = _flat(_json(best_hp))
        if flat:
            bind.execute(
                hps.insert(),
                [
                    {"experiment_id": exp_id, "name": n, "num_value": v, "text_value": t}
                    for n, v, t in flat
                ],
            )
        names = {str(x)[:255] for x in config.get("labels") or []}
        if names:
            bind.execute(
                labels.insert(), [{"experiment_id": exp_id, "label": x} for x in sorted(names)]
            )


def downgrade() -> None:
    op.drop_index("ix_experiment_labels_label", table_name="experiment_labels")
    op.drop_table("experiment_labels")
    op.drop_index("ix_experiment_hparams_text", table_name="experiment_hparams")
    op.drop_index("ix_experiment_hparams_num", table_name="experiment_hparams")
    op.drop_table("experiment_hparams")
    op.drop_index("ix_experiments_start_time", table_name="experiments")
    op.drop_index("ix_experiments_owner", table_name="experiments")
    op.drop_index("ix_experiments_metric_best", table_name="experiments")
    op.drop_index("ix_experiments_searcher_name", table_name="experiments")
    # Plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch copy of ``experiments``
    # would cascade-delete its trials on SQLite with foreign keys on.
    for column in (
        "best_trial_id",
        "best_searcher_metric",
        "smaller_is_better",
        "searcher_metric",
        "searcher_name",
    ):
        op.execute(f"ALTER TABLE experiments DROP COLUMN {column}")
