"""Broker-wide settings: the listener and the `--config KEY=VALUE` defaults.

Topic-level names given as broker-wide defaults (e.g. `retention.ms`) are kept as given and
read by the topic configs; the names below are the broker's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import BrokerConfigError

DEFAULT_LISTEN = "127.0.0.1:9092"


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """'HOST:PORT' (a bracketed IPv6 host allowed); BrokerConfigError if it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BrokerConfigError(f"{what} must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass
class BrokerSettings:
    listen: tuple[str, int] = ("127.0.0.1", 9092)
    advertised: tuple[str, int] | None = None  # None: the bound address
    socket_request_max_bytes: int = 104_857_600
    frame_timeout_s: float = 30.0   # a frame that has started must finish within this
    sasl_required: bool = False
    max_connections: int = 1000  # more are closed as they come (Kafka's max.connections)
    configs: dict[str, str] = field(default_factory=dict)  # every --config, as given

    def int_config(self, name: str, default: int, minimum: int = 0) -> int:
        text = self.configs.get(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise BrokerConfigError(f"{name} must be an integer, got {text!r}") from None
        if value < minimum:
            raise BrokerConfigError(f"{name} must be >= {minimum}, got {value}")
        return value

    def bool_config(self, name: str, default: bool) -> bool:
        text = self.configs.get(name)
        if text is None:
            return default
        if text.lower() not in ("true", "false"):
            raise BrokerConfigError(f"{name} must be true or false, got {text!r}")
        return text.lower() == "true"


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
    s.socket_request_max_bytes = s.int_config("socket.request.max.bytes",
                                              s.socket_request_max_bytes, minimum=1)
    s.frame_timeout_s = s.int_config("kdelay.frame.timeout.ms",
                                     int(s.frame_timeout_s * 1000), minimum=1) / 1000
    s.max_connections = s.int_config("max.connections", default_max_connections(), minimum=1)
    return s
