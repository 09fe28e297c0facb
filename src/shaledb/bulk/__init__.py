"""Bulk data movement: ingest of externally built SSTs (``ingest/``) and the
checkpoint-read engines (``read``, ``read_arrow``) the Spark data source runs."""
