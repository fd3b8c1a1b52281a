"""Alembic's environment for the metadata store's migrations, run programmatically.

:func:`beam_pipeline.metadata.connection.open_engine` runs ``alembic upgrade head`` on a
connection it has already opened (and, on SQLite, locked with ``BEGIN IMMEDIATE``), passed
in ``config.attributes["connection"]``; the migrations run inside that one transaction, so
two launchers opening a new store at once create it once. No ``alembic.ini``: the store is
opened by the pipeline, never by the ``alembic`` command.

A new revision (a file in ``versions/``, then edit ``schema.py`` to match it)::

    .venv/bin/python -c "from alembic import command; from alembic.config import Config; \
        c = Config(); c.set_main_option('script_location', 'beam_pipeline/metadata/migrations'); \
        command.revision(c, 'what it changes', rev_id='0003')"
"""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection)
with context.begin_transaction():
    context.run_migrations()
