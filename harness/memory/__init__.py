"""The memory space: units, views, encoders and index backends (Section 3 of the paper)."""
