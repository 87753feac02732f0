"""SASL exchanges on the server side: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
RFC 7677) over the credentials file's salted keys. One `Exchange` per authentication
attempt; `step(client_bytes)` returns the server's answer, and `done`/`user` tell the
outcome. A failed step raises AuthenticationFailed (the connection is then closed).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from ...errors import KdelayError
from .credentials import MECHANISMS, User

SUPPORTED = ("PLAIN", *MECHANISMS)


class AuthenticationFailed(KdelayError):
    """Wrong credentials or a malformed exchange; the message is safe to send back."""


class Exchange:
    def __init__(self, mechanism: str, users: dict[str, User]):
        if mechanism not in SUPPORTED:
            raise AuthenticationFailed(f"unsupported SASL mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.users = users
        self.user: str | None = None
        self.done = False
        self._scram: _Scram | None = None

    def step(self, data: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("the SASL exchange is already complete")
        if self.mechanism == "PLAIN":
            self.user = _plain(data, self.users)
            self.done = True
            return b""
        if self._scram is None:
            self._scram = _Scram(MECHANISMS[self.mechanism], self.mechanism, self.users)
            return self._scram.first(data)
        answer = self._scram.final(data)
        self.user, self.done = self._scram.user, True
        return answer


def _plain(data: bytes, users: dict[str, User]) -> str:
    parts = data.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed("malformed PLAIN message")
    authzid, name_b, password_b = parts
    try:
        name, password = name_b.decode(), password_b.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("malformed PLAIN message") from None
    user = users.get(name)
    if user is None or not user.check_password(password) or authzid not in (b"", name_b):
        raise AuthenticationFailed("authentication failed: invalid credentials")
    return name


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailed("malformed SCRAM message")
        out[key] = value
    return out


class _Scram:
    def __init__(self, hash_name: str, mechanism: str, users: dict[str, User]):
        self.hash_name = hash_name
        self.mechanism = mechanism
        self.users = users
        self.user: str | None = None

    def first(self, data: bytes) -> bytes:
        """client-first -> server-first (the combined nonce, the user's salt and rounds)."""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM message") from None
        gs2, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2 not in ("n", "y") or not bare:
            raise AuthenticationFailed("malformed SCRAM client-first message")
        attrs = _attributes(bare)
        name = attrs.get("n", "").replace("=2C", ",").replace("=3D", "=")
        client_nonce = attrs.get("r", "")
        user = self.users.get(name)
        if not client_nonce or user is None:
            raise AuthenticationFailed("authentication failed: invalid credentials")
        self.entry = user
        self.gs2_header = f"{gs2},{authzid},"
        self.nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
        self.client_first_bare = bare
        self.server_first = (f"r={self.nonce},s={base64.b64encode(user.salt).decode()},"
                             f"i={user.iterations}")
        return self.server_first.encode()

    def final(self, data: bytes) -> bytes:
        """client-final (the proof) -> server-final (the server's signature)."""
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM message") from None
        without_proof, _, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        expected_binding = base64.b64encode(self.gs2_header.encode()).decode()
        if attrs.get("r") != self.nonce or attrs.get("c") != expected_binding:
            raise AuthenticationFailed("authentication failed: bad nonce or channel binding")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM proof") from None
        keys = self.entry.keys[self.mechanism]
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.new(keys.stored_key, auth_message, self.hash_name).digest()
        if len(proof) != len(signature):
            raise AuthenticationFailed("authentication failed: invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash_name, client_key).digest(),
                                   keys.stored_key):
            raise AuthenticationFailed("authentication failed: invalid credentials")
        self.user = self.entry.name
        server_signature = hmac.new(keys.server_key, auth_message, self.hash_name).digest()
        return b"v=" + base64.b64encode(server_signature)
