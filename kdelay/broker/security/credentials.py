"""The SASL credentials file: salted SCRAM secrets, never a password in clear text.

One JSON object per line, one line per user:

    {"user": "alice", "iterations": 8192, "salt": "<base64>",
     "SCRAM-SHA-256": {"stored_key": "<base64>", "server_key": "<base64>"},
     "SCRAM-SHA-512": {"stored_key": "<base64>", "server_key": "<base64>"}}

RFC 5802's StoredKey and ServerKey for both hashes, from one salt and iteration count. One
entry serves all three mechanisms: SCRAM exchanges use the keys directly, and a PLAIN
password is checked by deriving its StoredKey with the entry's salt and comparing.
Written by `kdelay sasl-user add FILE NAME` (atomically, mode 0600).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from ... import fsio
from ...errors import KdelayError

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
DEFAULT_ITERATIONS = 8192  # Kafka's minimum is 4096
MIN_ITERATIONS = 4096


class CredentialsError(KdelayError):
    """The credentials file is unreadable or malformed (its line is named)."""


@dataclass(frozen=True)
class ScramKeys:
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True)
class User:
    name: str
    salt: bytes
    iterations: int
    keys: dict[str, ScramKeys]  # mechanism -> keys

    def check_password(self, password: str) -> bool:
        """PLAIN: derive the StoredKey of `password` and compare (constant time). Costs one
        PBKDF2 of `iterations` rounds (a few ms)."""
        keys = self.keys["SCRAM-SHA-256"]
        derived = scram_keys("sha256", password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(derived.stored_key, keys.stored_key)


def scram_keys(hash_name: str, password: bytes, salt: bytes, iterations: int) -> ScramKeys:
    """RFC 5802: SaltedPassword = Hi(password, salt, i); StoredKey = H(HMAC(SP, "Client
    Key")); ServerKey = HMAC(SP, "Server Key")."""
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return ScramKeys(hashlib.new(hash_name, client_key).digest(),
                     hmac.new(salted, b"Server Key", hash_name).digest())


def make_user(name: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> User:
    salt = os.urandom(24)
    return User(name, salt, iterations,
                {mech: scram_keys(h, password.encode(), salt, iterations)
                 for mech, h in MECHANISMS.items()})


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _line(user: User) -> str:
    body: dict = {"user": user.name, "iterations": user.iterations, "salt": _b64(user.salt)}
    for mech, keys in user.keys.items():
        body[mech] = {"stored_key": _b64(keys.stored_key), "server_key": _b64(keys.server_key)}
    return json.dumps(body, sort_keys=True)


def _parse(line: str, where: str) -> User:
    try:
        body = json.loads(line)
        name = body["user"]
        iterations = body["iterations"]
        if not isinstance(name, str) or not name or not isinstance(iterations, int) \
                or iterations < MIN_ITERATIONS:
            raise ValueError("bad user or iterations")
        keys = {mech: ScramKeys(base64.b64decode(body[mech]["stored_key"], validate=True),
                                base64.b64decode(body[mech]["server_key"], validate=True))
                for mech in MECHANISMS}
        return User(name, base64.b64decode(body["salt"], validate=True), iterations, keys)
    except (ValueError, KeyError, TypeError) as e:
        raise CredentialsError(f"{where}: not a credentials entry ({e})") from None


def load(path: str) -> dict[str, User]:
    """Every user in the file (CredentialsError naming the bad line)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CredentialsError(f"cannot read the credentials file {path}: {e.strerror}") from None
    users: dict[str, User] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            user = _parse(line, f"{path}:{n}")
            users[user.name] = user
    return users


def add_user(path: str, name: str, password: str,
             iterations: int = DEFAULT_ITERATIONS) -> None:
    """Add or replace `name`'s entry; the file is rewritten atomically with mode 0600."""
    if not name or any(c in name for c in "\n\r\0"):
        raise CredentialsError(f"bad user name {name!r}")
    if not password:
        raise CredentialsError("the password is empty")
    users = load(path) if os.path.exists(path) else {}
    users[name] = make_user(name, password, iterations)
    body = "".join(_line(u) + "\n" for u in users.values()).encode()
    fsio.atomic_write(path, body)
    os.chmod(path, 0o600)
