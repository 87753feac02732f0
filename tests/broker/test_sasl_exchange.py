"""The SASL exchanges against an independent client implementation (kafka-python's SCRAM
client), and the credentials file: salted keys only, one entry for every mechanism."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay.broker.security import credentials
from kdelay.broker.security.sasl import AuthenticationFailed, Exchange

ScramClient = pytest.importorskip("kafka.net.sasl.scram").ScramClient

ITERATIONS = 4096  # the minimum: keeps PBKDF2 cheap in tests


def users_with(name: str, password: str) -> dict[str, credentials.User]:
    return {name: credentials.make_user(name, password, ITERATIONS)}


def scram_round(mechanism: str, users: dict, name: str, password: str) -> Exchange:
    client = ScramClient(name, password, mechanism)
    server = Exchange(mechanism, users)
    server_first = server.step(client.first_message())
    client.process_server_first_message(server_first)
    server_final = server.step(client.final_message())
    client.process_server_final_message(server_final)  # raises if the server's proof is wrong
    return server


names = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters=",="),
                min_size=1, max_size=20)
passwords = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), min_size=1,
                    max_size=30)


@settings(max_examples=15, deadline=None)
@given(name=names, password=passwords, mechanism=st.sampled_from(["SCRAM-SHA-256",
                                                                   "SCRAM-SHA-512"]))
def test_scram_with_the_right_password_authenticates_both_ways(name, password, mechanism):
    server = scram_round(mechanism, users_with(name, password), name, password)
    assert server.done and server.user == name


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_wrong_password_is_refused(mechanism):
    users = users_with("alice", "right")
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        scram_round(mechanism, users, "alice", "wrong")


def test_scram_unknown_user_and_replayed_nonce_are_refused():
    users = users_with("alice", "pw")
    with pytest.raises(AuthenticationFailed):
        scram_round("SCRAM-SHA-256", users, "bob", "pw")
    client = ScramClient("alice", "pw", "SCRAM-SHA-256")
    server = Exchange("SCRAM-SHA-256", users)
    client.process_server_first_message(server.step(client.first_message()))
    final = client.final_message().replace(b"r=", b"r=x", 1)  # not the server's nonce
    with pytest.raises(AuthenticationFailed):
        server.step(final)
    assert server.user is None


def test_plain_checks_the_password_against_the_salted_keys():
    users = users_with("alice", "s3cret")
    ok = Exchange("PLAIN", users)
    assert ok.step(b"\0alice\0s3cret") == b"" and ok.done and ok.user == "alice"
    for bad in (b"\0alice\0wrong", b"\0bob\0s3cret", b"alice\0s3cret", b"other\0alice\0s3cret",
                b"\0alice\0s3cret\0extra", b"\xff\0alice\0s3cret"[1:] + b"\xff"):
        with pytest.raises(AuthenticationFailed):
            Exchange("PLAIN", users).step(bad)


@pytest.mark.parametrize("garbage", [b"", b"x", b"n,,", b"n,,r=abc", b"n,,n=alice",
                                     b"\xff\xfe", b"p=tls,,n=alice,r=x"])
def test_malformed_scram_first_messages_are_refused(garbage):
    with pytest.raises(AuthenticationFailed):
        Exchange("SCRAM-SHA-512", users_with("alice", "pw")).step(garbage)


def test_unknown_mechanism_is_refused():
    with pytest.raises(AuthenticationFailed, match="unsupported"):
        Exchange("GSSAPI", {})


def test_credentials_file_holds_no_password_and_round_trips(tmp_path):
    path = str(tmp_path / "users")
    credentials.add_user(path, "alice", "hunter2-password", iterations=ITERATIONS)
    credentials.add_user(path, "bob", "other", iterations=ITERATIONS)
    credentials.add_user(path, "alice", "changed", iterations=ITERATIONS)  # replaces
    with open(path) as f:
        text = f.read()
    assert "hunter2" not in text and "changed" not in text and "other" not in text
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    users = credentials.load(path)
    assert sorted(users) == ["alice", "bob"]
    assert users["alice"].check_password("changed")
    assert not users["alice"].check_password("hunter2-password")
    scram_round("SCRAM-SHA-512", users, "bob", "other")


@pytest.mark.parametrize("line", ["not json", "{}", '{"user": "a", "iterations": 10, '
                                  '"salt": "AA=="}', '{"user": "", "iterations": 8192}'])
def test_a_damaged_credentials_file_is_refused_naming_the_line(tmp_path, line):
    path = tmp_path / "users"
    path.write_text(line + "\n")
    with pytest.raises(credentials.CredentialsError, match=f"{path}:1"):
        credentials.load(str(path))
