"""One writer's machinery: memtable, WAL thread, memtable flush, recovery, the read
path, SST readers and caches, pins and indexes. Roles and handles build on it."""
