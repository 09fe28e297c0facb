"""The handles users hold: the writer (``Db``), its snapshots, read-only readers
(``DbReader``) and write batches. The public names are re-exported by ``shaledb``."""
