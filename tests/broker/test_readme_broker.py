"""README's "Running the broker" examples run as written: each ```python block with the
```text block after it (what it must print), and the kcat line where kcat is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from cookbook_recipes import Recipe, run
from produce_support import TIMEOUT_S, answers

from kdelay import Broker

README = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "README.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```\n(?:\s*^```text\n(.*?)^```\n)?", re.M | re.S)


def section() -> str:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index("## Running the broker")
    return text[start:text.index("\n## ", start + 1)]


EXAMPLES = [Recipe(f"readme-{i}", False, m.group(1), m.group(2))
            for i, m in enumerate(_BLOCK.finditer(section()))]


def test_the_section_has_its_examples():
    assert len(EXAMPLES) == 3 and all(e.expected for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.title for e in EXAMPLES])
def test_example(example, tmp_path):
    if "confluent_kafka" in example.code and not answers(1):
        pytest.skip("librdkafka sends v2 record batches only to a broker that answers Fetch")
    run(example, str(tmp_path))


def test_kcat_line(tmp_path):
    kcat = shutil.which("kcat")
    if kcat is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kcat is not installed (.ci/run installs it)")
        pytest.skip("kcat is not installed here (.ci/run installs it)")
    if not answers(1):
        pytest.skip("kcat (librdkafka) sends v2 record batches only to a broker that "
                    "answers Fetch")
    line = re.search(r"^printf .*kcat.*$", section(), re.M).group(0)
    with Broker(tmp_path, listen="127.0.0.1:0") as broker:
        subprocess.run(line.replace("127.0.0.1:9092", broker.bootstrap_servers), shell=True,
                       check=True, timeout=TIMEOUT_S)
        [record] = broker._server.state.topics.get("jobs").partition(0).read(0)
    assert (record.key, record.value) == (b"job-1", b"payload")
    assert record.headers == [("kdelay.delay_ms", b"60000")]
