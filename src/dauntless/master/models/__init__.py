"""The master's model modules, one per aggregate (issue 18 scope 4, Prefect server's
shape: ../shared/design/STYLE.md): plain functions that take an open SQLAlchemy session
first (and the master's :class:`~dauntless.master.context.MasterContext` second when they
need its caches, config or clock) and read or change the rows of one aggregate. They
never import the routes or the loop, and among themselves they are layered without a
circle (docs/architecture.md). The caller owns the transaction (``Database.read()`` or
``Database.write()``, or ``MasterContext.write``); a function that makes work for the
control loop wakes it once that transaction commits (``ctx.wake_after_commit``).

:mod:`.experiments`, :mod:`.lifecycle`, :mod:`.search`, :mod:`.trials`, :mod:`.runs`,
:mod:`.allocations`, :mod:`.agents`, :mod:`.checkpoints`, :mod:`.metrics`, :mod:`.logs`,
:mod:`.users`.
"""
