"""`kdelay cancel`, `kdelay reschedule` and `kdelay stats --broker`: the same operations on a
stopped root (in process, taking the topic's lock) or on a running broker (through its
operations endpoint, `kdelay serve --http`).

    kdelay cancel (--broker URL | --root ROOT) TOPIC PARTITION OFFSET...
    kdelay reschedule (--broker URL | --root ROOT) TOPIC PARTITION OFFSET
                      (--deliver-after MS | --delay-ms MS)
    kdelay stats --broker URL [TOPIC]

URL is HOST:PORT or http(s)://HOST:PORT. With a broker that requires SASL, give --user and
the password in the environment variable KDELAY_BROKER_PASSWORD; --cafile trusts a TLS
certificate. Exit status: 0 done, 1 refused by the log or the broker, 2 bad usage.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import urllib.error
import urllib.request

from ..errors import InspectError, KdelayError
from .formatting import Out

PASSWORD_ENV = "KDELAY_BROKER_PASSWORD"


class Refused(KdelayError):
    """The broker (or the log) refused the operation; the message says why."""


def _target(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--broker", metavar="URL", help="a running broker's operations endpoint")
    where.add_argument("--root", metavar="ROOT", help="a stopped broker's root (takes the lock)")
    p.add_argument("--user", help="SASL user for the endpoint (password: $" + PASSWORD_ENV + ")")
    p.add_argument("--cafile", help="trust this PEM certificate for https")


def add_parsers(sub: argparse._SubParsersAction, non_negative_int) -> None:
    c = sub.add_parser("cancel", help="cancel pending records by offset")
    _target(c)
    c.add_argument("topic")
    c.add_argument("partition", type=non_negative_int)
    c.add_argument("offsets", type=non_negative_int, nargs="+", metavar="OFFSET")
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=cmd_cancel)
    r = sub.add_parser("reschedule", help="move one pending record to another time")
    _target(r)
    r.add_argument("topic")
    r.add_argument("partition", type=non_negative_int)
    r.add_argument("offset", type=non_negative_int)
    when = r.add_mutually_exclusive_group(required=True)
    when.add_argument("--deliver-after", type=non_negative_int, metavar="MS")
    when.add_argument("--delay-ms", type=non_negative_int, metavar="MS")
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=cmd_reschedule)


def endpoint_call(url: str, method: str, path: str, body: dict | None = None, *,
                  user: str | None = None, cafile: str | None = None) -> dict:
    """One JSON call to a broker's operations endpoint; Refused on a 4xx/5xx answer."""
    base = url if "://" in url else f"http://{url}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    if user is not None:
        secret = f"{user}:{os.environ.get(PASSWORD_ENV, '')}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(secret).decode())
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            answer = json.loads(e.read())
            message = f"{answer.get('error')}: {answer.get('message')}"
        except ValueError:
            message = f"HTTP {e.code}"
        raise Refused(f"the broker refused: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise InspectError(f"cannot reach the broker at {base}: {reason}") from None


def _print(out: Out, answer: dict, as_json: bool, text: str) -> None:
    print(json.dumps(answer) if as_json else text)


def cmd_cancel(args: argparse.Namespace, out: Out) -> int:
    if args.broker:
        answer = endpoint_call(args.broker, "POST",
                               f"/v1/topics/{args.topic}/partitions/{args.partition}/cancel",
                               {"offsets": args.offsets}, user=args.user, cafile=args.cafile)
    else:
        answer = {"cancelled": _with_topic(args, lambda t: t.cancel(args.partition,
                                                                    args.offsets))}
    _print(out, answer, args.json, f"cancelled {answer['cancelled']} of {len(args.offsets)}")
    return 0


def cmd_reschedule(args: argparse.Namespace, out: Out) -> int:
    when = ({"deliver_after": args.deliver_after} if args.deliver_after is not None
            else {"delay_ms": args.delay_ms})
    if args.broker:
        answer = endpoint_call(
            args.broker, "POST", f"/v1/topics/{args.topic}/partitions/{args.partition}/"
            "reschedule", {"offset": args.offset, **when}, user=args.user, cafile=args.cafile)
    else:
        result = _with_topic(args, lambda t: t.reschedule(args.partition, args.offset, **when))
        answer = {"base_offset": result.base_offset, "last_offset": result.last_offset,
                  "deliver_after": result.deliver_after}
    _print(out, answer, args.json, f"rescheduled as offset {answer['base_offset']}, due at "
                                   f"{answer['deliver_after']}")
    return 0


def _with_topic(args: argparse.Namespace, operation):
    from ..clients.topic import Topic
    if not os.path.isdir(os.path.join(args.root, ".kdelay-topics")):
        raise InspectError(f"{args.root} holds no topics")
    topic = Topic.open(args.root, args.topic)
    try:
        if args.partition >= topic.partitions:
            raise Refused(f"topic {args.topic!r} has no partition {args.partition}")
        return operation(topic)
    finally:
        topic.close()


def cmd_broker_stats(args: argparse.Namespace, out: Out) -> int:
    """`kdelay stats --broker URL [TOPIC]`: a running broker's topics, as its endpoint says."""
    if args.dir:
        answer = endpoint_call(args.broker, "GET", f"/v1/topics/{args.dir}", user=args.user,
                               cafile=args.cafile)
    else:
        names = endpoint_call(args.broker, "GET", "/v1/topics", user=args.user,
                              cafile=args.cafile)["topics"]
        answer = {"topics": {n: endpoint_call(args.broker, "GET", f"/v1/topics/{n}",
                                              user=args.user, cafile=args.cafile)
                             for n in names}}
    print(json.dumps(answer, indent=None if args.json else 2))
    return 0
