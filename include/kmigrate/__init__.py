"""kmigrate: offset-preserving Kafka cluster migration (core library, no Airflow or Spark imports)."""
from __future__ import annotations

__version__ = "0.1.0"
