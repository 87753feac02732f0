"""The operations endpoint (`--http HOST:PORT`): Prometheus metrics, topic stats, cancel and
reschedule, health; served by aiohttp on the broker's own event loop."""
