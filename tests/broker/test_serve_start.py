"""`kdelay serve` loads kio without hypothesis (tools/serve.py): kio's test strategies are
not registered, kio still encodes and decodes, and hypothesis stays importable afterwards
(hidden only while kio's types load). Run in a fresh interpreter: this one has both."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import sys
from kdelay.tools.serve import load_kio_without_test_strategies
load_kio_without_test_strategies()
assert "hypothesis" not in sys.modules, "hypothesis was loaded"
from kdelay.broker import protocol
from kdelay.broker.apis.api_versions import api_versions_response
from kdelay.broker.dispatcher import Dispatcher
from kdelay.broker.apis import all_apis
schema = protocol.schema(18, 3)
frame = b"".join(bytes(p) for p in protocol.encode_response(
    schema, 7, api_versions_response(schema.response_type, Dispatcher(all_apis()))))
assert protocol.peek_correlation_id(frame) == 7
assert "hypothesis" not in sys.modules, "hypothesis was loaded by a broker's first answer"
import hypothesis.strategies  # still there for whoever wants it
print("ok")
"""


def test_serve_loads_kio_without_hypothesis():
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
