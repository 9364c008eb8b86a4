"""The master's model modules, one per aggregate (issue 18 scope 4, Prefect server's
shape: ../shared/design/STYLE.md): plain functions that take an open SQLAlchemy session
first and read or change the rows of one aggregate. They import only :mod:`..db`,
:mod:`..errors` and :mod:`..states`, never the experiment manager or the routes, so that
both can call them without an import circle. The caller owns the transaction
(``Database.read()`` or ``Database.write()``).

Moved here so far: :mod:`.allocations` (an allocation's parts, its preemption signal and
rendezvous) and :mod:`.trials` (a trial's next searcher operation); the rest of the
experiment manager's reads follow.
"""
