"""`kdelay serve ROOT`: the Kafka-protocol broker in the foreground (kdelay.broker)."""

from __future__ import annotations

import argparse
import logging
import sys

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
    s.add_argument("--http", metavar="HOST:PORT",
                   help="also serve the operations endpoint (metrics, cancel, reschedule)")
    s.add_argument("--sasl-users", metavar="FILE",
                   help="require SASL (PLAIN, SCRAM-SHA-256/512) with these credentials "
                        "(written by `kdelay sasl-user add`)")
    s.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this PEM certificate")
    s.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    s.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    s.set_defaults(handler=cmd_serve)


def load_kio_without_test_strategies() -> None:
    """Load kio as where hypothesis is not installed. kio registers hypothesis strategies
    for its types whenever hypothesis imports (a test library: present with the dev
    extra), which cost a third of a broker's start (~0.25 s here) and which a broker never
    uses; kio's own `import hypothesis` is optional (it catches the ImportError), so hiding
    hypothesis while kio's types load leaves kio whole. This process only: `kdelay.Broker`
    in a user's process loads kio as that process has it. A no-op once either is loaded."""
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # (ImportError on import)
    try:
        import kio.static.primitive  # noqa: F401  (the types that look for hypothesis)
    finally:
        del sys.modules["hypothesis"]


def cmd_serve(args: argparse.Namespace, out: object) -> int:
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_kio_without_test_strategies()
    from ..broker.broker import serve_forever
    from ..broker.errors import BrokerConfigError
    from ..broker.event_loop import run
    from ..broker.security.credentials import CredentialsError
    try:
        run(serve_forever(args.root, {
            "listen": args.listen, "advertised": args.advertised_listener,
            "config": dict(args.config)}, {
            "sasl_users": args.sasl_users, "tls_cert": args.tls_cert,
            "tls_key": args.tls_key, "http": args.http}))
    except (BrokerConfigError, CredentialsError) as e:
        raise InspectError(str(e)) from None
    return 0


def add_sasl_user_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sasl-user", help="manage the broker's SASL credentials file")
    actions = s.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add or replace a user (the password is read from "
                                         "standard input; a prompt on a terminal)")
    add.add_argument("file")
    add.add_argument("name")
    add.set_defaults(handler=cmd_sasl_user_add)


def cmd_sasl_user_add(args: argparse.Namespace, out: object) -> int:
    import getpass
    import sys

    from ..broker.security.credentials import CredentialsError, add_user
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise InspectError("the passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    try:
        add_user(args.file, args.name, password)
    except CredentialsError as e:
        raise InspectError(str(e)) from None
    print(f"{args.name} added to {args.file}")
    return 0
