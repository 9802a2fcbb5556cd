"""Run records: the schema every writer and reader shares, the run folder, the ledger, provenance."""

from harness.records.rundir import RunDir, StageMismatch, atomic_write, config_hash

__all__ = ["RunDir", "StageMismatch", "atomic_write", "config_hash"]
