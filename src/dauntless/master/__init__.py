"""The master: REST API (:mod:`.app`, :mod:`.routes` and the ``routes_*`` modules),
database (:mod:`.db`), the shared state (:mod:`.context`), the model functions per
aggregate (:mod:`.models`) and the control loop (:mod:`.loop`, placing work through
:mod:`.scheduling`); docs/architecture.md shows the layout.

Run it with ``python -m dauntless.master`` or build the app with
:func:`dauntless.master.app.create_app`.
"""
