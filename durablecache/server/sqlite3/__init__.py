"""Django's SQLite backend, with the writers of one process queued on a lock.

Use as ``ENGINE = "durablecache.server.sqlite3"`` (durablecache.env does for every
SQLite database). See ``base.DatabaseWrapper``.
"""
