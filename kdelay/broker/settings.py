"""Broker-wide settings: the listener and the `--config KEY=VALUE` defaults.

Topic-level names given as broker-wide defaults (e.g. `retention.ms`) are kept as given and
read by the topic configs (share group names likewise by the group configs); the broker's
own names, with their defaults and least values, are BROKER_CONFIGS, read through
`BrokerSettings.config`. A name none of these knows is named in a warning at start (as
Kafka does: a properties file may carry another broker's settings), never silently taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import BrokerConfigError
from .topic_configs import BOOLEAN, INT, LONG

DEFAULT_LISTEN = "127.0.0.1:9092"


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """'HOST:PORT' (a bracketed IPv6 host allowed); BrokerConfigError if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BrokerConfigError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class BrokerConfig:
    """One of the broker's own names: an integer with its least value, or a boolean; its
    type as DescribeConfigs shows it (Kafka's ConfigType: topic_configs.INT, ...)."""
    name: str
    config_type: int
    default: int | bool | None  # None: worked out at start (max.connections)
    minimum: int = 0
    doc: str = ""


BROKER_CONFIGS: dict[str, BrokerConfig] = {c.name: c for c in (
    BrokerConfig("num.partitions", INT, 1, 1,
                 "partitions of an auto-created topic, or one created without a count"),
    BrokerConfig("auto.create.topics.enable", BOOLEAN, True,
                 doc="create a topic a producer or a consumer names"),
    BrokerConfig("log.retention.check.interval.ms", LONG, 300_000, 1,
                 "how often retention, compaction and the tiered sync run"),
    BrokerConfig("socket.request.max.bytes", INT, 104_857_600, 1,
                 "the largest request frame"),
    BrokerConfig("kdelay.frame.timeout.ms", INT, 30_000, 1,
                 "a request that has started must arrive within this"),
    BrokerConfig("max.connections", INT, None, 1,
                 "more are closed as they come (default: the descriptor limit less 1024)"),
    BrokerConfig("producer.id.expiration.ms", INT, 86_400_000, 1,
                 "an idempotent producer's state is dropped after this long idle"),
    BrokerConfig("group.initial.rebalance.delay.ms", INT, 3_000, 0,
                 "a new classic group waits this long for more members"),
    BrokerConfig("group.consumer.session.timeout.ms", INT, 45_000, 1,
                 "a KIP-848 member silent this long leaves its group"),
    BrokerConfig("group.consumer.heartbeat.interval.ms", INT, 5_000, 1,
                 "how often a KIP-848 member is told to heartbeat"),
    BrokerConfig("group.share.session.timeout.ms", INT, 45_000, 1,
                 "a share group member silent this long leaves and releases its records"),
    BrokerConfig("group.share.heartbeat.interval.ms", INT, 5_000, 1,
                 "how often a share group member is told to heartbeat"),
)}


def int_default(name: str) -> int:
    """The default of one of BROKER_CONFIGS' integers (ValueError for one worked out at
    start, or a boolean)."""
    value = BROKER_CONFIGS[name].default
    if value is None or isinstance(value, bool):
        raise ValueError(f"{name} has no fixed integer default")
    return value


@dataclass
class BrokerSettings:
    listen: tuple[str, int] = ("127.0.0.1", 9092)
    advertised: tuple[str, int] | None = None  # None: the bound address
    socket_request_max_bytes: int = int_default("socket.request.max.bytes")
    # a frame that has started must finish within this
    frame_timeout_s: float = int_default("kdelay.frame.timeout.ms") / 1000
    sasl_required: bool = False
    max_connections: int = 1000  # more are closed as they come (Kafka's max.connections)
    configs: dict[str, str] = field(default_factory=dict)  # every --config, as given

    def config(self, name: str) -> int | bool:
        """The value of one of BROKER_CONFIGS: given, else its default (BrokerConfigError
        for a value that is not one; KeyError for a name it does not list)."""
        spec = BROKER_CONFIGS[name]
        text = self.configs.get(name)
        if isinstance(spec.default, bool):
            if text is None:
                return spec.default
            if text.lower() not in ("true", "false"):
                raise BrokerConfigError(f"{name} must be true or false, got {text!r}")
            return text.lower() == "true"
        if text is None:
            return default_max_connections() if spec.default is None else spec.default
        try:
            value = int(text)
        except ValueError:
            raise BrokerConfigError(f"{name} must be an integer, got {text!r}") from None
        if value < spec.minimum:
            raise BrokerConfigError(f"{name} must be >= {spec.minimum}, got {value}")
        return value


def default_max_connections() -> int:
    """What the process's descriptor limit leaves room for, beside the logs' own files."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 100_000
    return max(16, soft - 1024)


def settings_from(listen: str = DEFAULT_LISTEN, advertised: str | None = None,
                  config: dict[str, str] | None = None) -> BrokerSettings:
    configs = {str(k): str(v) for k, v in (config or {}).items()}
    s = BrokerSettings(listen=parse_host_port(listen, "listen"),
                       advertised=parse_host_port(advertised, "advertised listener")
                       if advertised else None, configs=configs)
    s.socket_request_max_bytes = int(s.config("socket.request.max.bytes"))
    s.frame_timeout_s = int(s.config("kdelay.frame.timeout.ms")) / 1000
    s.max_connections = int(s.config("max.connections"))
    return s
