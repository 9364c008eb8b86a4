"""Alembic environment: runs migrations on the engine the master hands in."""

from alembic import context

from dauntless.master.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        from dauntless.master.db.engine import make_engine

        url = config.get_main_option("sqlalchemy.url")
        if url is None:
            raise RuntimeError("alembic: no engine given and no sqlalchemy.url configured")
        engine = make_engine(url)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite's way to change a table (copy, drop, rename; "batch" mode) needs
            # foreign keys off, or dropping a parent table cascades into its children.
            # The pragma is ignored inside a transaction, so it is set before one begins
            # (the driver opens none for a PRAGMA), and set back on afterwards.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            compare_type=True,
        )
        try:
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            if sqlite:
                connection.rollback()
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


run_migrations_online()
