"""From records to the table and back out: collection into ``results.parquet``, the seed-averaged
points and their spread, scaling fits, provenance, and ``attnbench-compare``'s verdicts."""
