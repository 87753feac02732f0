"""A one-partition Produce answer from its template (answer_template.py) is byte for byte
kio's encoding of the same answer, at every Produce version the broker answers, for any
correlation id, offsets, append time, topic name and partition; a shape whose markers kio
does not write as fixed-width integers is refused (the caller then encodes with kio)."""

from __future__ import annotations

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kdelay.broker import protocol
from kdelay.broker.answer_template import AnswerTemplate, Encoded, template_or_none
from kdelay.broker.apis.produce import _answer, _one_partition_answer
from kdelay.broker.dispatcher import RequestContext

INT64 = st.integers(-1, 2**63 - 1)


def context(version: int) -> RequestContext:
    header = types.SimpleNamespace(correlation_id=0)
    broker = types.SimpleNamespace(produce_answers={})
    return RequestContext(0, version, header, protocol.schema(0, version).response_type,
                          broker, None)  # type: ignore[arg-type]


@given(version=st.integers(3, 10), correlation_id=st.integers(-2**31, 2**31 - 1),
       base=INT64, start=INT64,
       append_time=st.one_of(st.just(-1), st.integers(0, 253_402_300_799_000)),
       topic=st.text(min_size=1, max_size=40), index=st.integers(0, 2**31 - 1))
def test_a_template_answer_is_kios_encoding(version, correlation_id, base, start,
                                            append_time, topic, index):
    ctx = context(version)
    template = _one_partition_answer(ctx, topic, index)
    if version >= 5:  # (v3, v4 have no log start offset: kio encodes those)
        assert template is not None
    if template is None:
        return
    got = template.answer(correlation_id, base, append_time, start)
    assert isinstance(got, Encoded)
    want = protocol.encode_response(
        protocol.schema(0, version), correlation_id,
        _answer(ctx, [(topic, [(index, ErrorCode.none, None, (), base, start,
                                append_time)])]))
    assert b"".join(got) == b"".join(bytes(p) for p in want)


def test_a_shape_without_a_fixed_width_place_for_a_value_is_refused():
    schema = protocol.schema(0, 10)

    def make(*values):  # the values never reach the bytes: no place for them
        return _answer(context(10), [("t", [(0, ErrorCode.none, None, (), 1, 2, -1)])])
    with pytest.raises(ValueError, match="exactly once"):
        AnswerTemplate(schema, make, 3)
    assert template_or_none(schema, make, 3) is None  # (its callers then use kio)


@given(version=st.integers(0, 4), correlation_id=st.integers(-2**31, 2**31 - 1))
def test_the_api_versions_answer_is_kios_encoding(version, correlation_id):
    """ApiVersions is answered from a frame kio encoded once per version, the correlation
    id packed in: byte for byte what kio encodes for that request."""
    import asyncio

    from kdelay.broker.apis import all_apis
    from kdelay.broker.apis.api_versions import api_versions_response, handle_api_versions
    from kdelay.broker.dispatcher import Dispatcher

    dispatcher = Dispatcher(all_apis())
    broker = types.SimpleNamespace(api_versions_answers={}, dispatcher=dispatcher)
    api_schema = protocol.schema(18, version)
    header = types.SimpleNamespace(correlation_id=correlation_id)
    ctx = RequestContext(18, version, header, api_schema.response_type, broker,
                         None)  # type: ignore[arg-type]
    for _ in range(2):  # the first answer makes the template, the second uses it
        got = asyncio.run(handle_api_versions(ctx, None))
        assert isinstance(got, Encoded) and broker.api_versions_answers[version] is not None
        want = protocol.encode_response(api_schema, correlation_id, api_versions_response(
            api_schema.response_type, dispatcher))
        assert b"".join(bytes(p) for p in got) == b"".join(bytes(p) for p in want)
