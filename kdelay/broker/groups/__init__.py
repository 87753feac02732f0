"""Kafka's groups over the wire: the classic group protocol's coordinator, and committed
offsets kept in the engine's groups layer (one position with the in-process Consumer)."""
