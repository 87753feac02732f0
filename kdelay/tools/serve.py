"""`kdelay serve ROOT`: the Kafka-protocol broker in the foreground (kdelay.broker)."""

from __future__ import annotations

import argparse
import asyncio
import logging

from ..errors import InspectError


def key_value(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--config takes KEY=VALUE, got {text!r}")
    return name.strip(), value.strip()


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="serve ROOT's topics over Kafka's wire protocol")
    s.add_argument("root")
    s.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT")
    s.add_argument("--advertised-listener", metavar="HOST:PORT",
                   help="the address Metadata names (default: the bound one)")
    s.add_argument("--config", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="a broker-wide default (repeatable)")
    s.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    s.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace, out: object) -> int:
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ..broker.broker import serve_forever
    from ..broker.errors import BrokerConfigError
    try:
        asyncio.run(serve_forever(args.root, {
            "listen": args.listen, "advertised": args.advertised_listener,
            "config": dict(args.config)}))
    except BrokerConfigError as e:
        raise InspectError(str(e)) from None
    return 0
