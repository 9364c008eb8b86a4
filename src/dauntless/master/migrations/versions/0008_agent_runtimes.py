"""agent runtimes

Adds ``agents.runtime`` (what the agent reported at registration: its runtime's name,
whether it runs container images, whether it can make private mount namespaces) and
``allocations.exit_fatal`` (the part failed in a way a restart cannot mend, such as a
Python environment that does not build).

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-25 03:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("runtime", sa.JSON(), nullable=True))
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(
            sa.Column("exit_fatal", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("exit_fatal")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("runtime")
