"""The master: REST API (:mod:`.app`, :mod:`.routes` and the ``routes_*`` modules),
database (:mod:`.db`), experiment manager (:mod:`.manager`) and scheduling loop
(:mod:`.scheduling`).

Run it with ``python -m dauntless.master`` or build the app with
:func:`dauntless.master.app.create_app`.
"""
