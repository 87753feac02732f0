"""The API families, one module each (as Kafka's KafkaApis groups its handlers); each
module's APIS lists the `Api`s it answers."""

from __future__ import annotations

from importlib import import_module

from ..dispatcher import Api

FAMILIES = (
    "api_versions",
    "metadata",
    "topics_admin",
    "configs",
    "log_dirs",
    "produce",
    "fetch",
    "list_offsets",
    "groups",
    "consumer_groups",
    "offsets",
    "share",
    "sasl",
)


def all_apis() -> list[Api]:
    """Every API the broker answers, from every family module."""
    out: list[Api] = []
    for family in FAMILIES:
        out += import_module(f"{__name__}.{family}").APIS
    return out
