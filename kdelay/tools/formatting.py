"""How the command line shows things: times, durations, bytes, JSON lines, errors."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime


def fmt_time(ms: int | None) -> str:
    """ISO-8601 UTC with milliseconds; '?' for values no calendar holds (corrupt data)."""
    if ms is None:
        return "-"
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, ValueError, OSError):
        return "?"
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def iso_or_none(ms: int | None) -> str | None:
    s = fmt_time(ms)
    return None if s in ("-", "?") else s


def fmt_duration(ms: int) -> str:
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{sign}{ms / 1000:.1f} s"
    if s < 3600:
        return f"{sign}{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{sign}{s // 3600} h {s % 3600 // 60} min"
    return f"{sign}{s // 86400} d {s % 86400 // 3600} h"


def show_bytes(b: bytes | None, limit: int) -> str:
    """Bytes shown safely on a terminal: quoted text when printable UTF-8, else hex;
    truncated to `limit` characters/bytes with the full length noted."""
    if b is None:
        return "null"
    try:
        text = b.decode("utf-8")
        printable = text.isprintable()
    except UnicodeDecodeError:
        printable = False
    if printable:
        body = text[:limit].replace("\\", "\\\\").replace('"', '\\"')
        more = f"… ({len(b)} B)" if len(text) > limit else ""
        return f'"{body}"{more}'
    more = f"… ({len(b)} B)" if len(b) > limit else ""
    return "0x" + b[:limit].hex() + more


def bytes_json(b: bytes | None) -> tuple[str | None, str | None]:
    """(text if valid UTF-8, hex) — both None for a null key or value."""
    if b is None:
        return None, None
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return text, b.hex()


class Out:
    """stdout writer that lets a closed pipe (`| head`) end the program quietly."""

    def __init__(self) -> None:
        self.stream = sys.stdout

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def json(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj, separators=(", ", ": ")) + "\n")


def err(msg: str) -> None:
    sys.stderr.write(f"kdelay: {msg}\n")

