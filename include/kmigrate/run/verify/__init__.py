"""Verification: one partition on both clusters side by side, and by whole record batches for many partitions at once."""
