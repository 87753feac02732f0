"""`kdelay serve`: a broker speaking Kafka's wire protocol over the engine's topics.

Importing this package loads nothing of the protocol library (kio); a broker's start does.
docs/broker.md has the design and a "where to look" table.
"""

from .broker import Broker

__all__ = ["Broker"]
