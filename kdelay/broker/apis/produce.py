"""Produce (key 0, v3..v10) and InitProducerId (key 22, v0..v4).

Each partition's records field is checked whole first (wire_batch.py: framing, CRC,
decompression, the records and their kdelay headers, in one compiled pass), then each
batch is checked against its producer's state (producer_state.py) and stored with
`Log.append_client_batch` as runs of consecutive offsets (the offsets the client computes
are the log offsets). A refused partition writes nothing and the request's other
partitions are unaffected. The append runs on the event loop: it is a write into the page
cache (plus an fsync where the topic's flush policy says), no longer than kio's encoding
of the answer; acks=1 and acks=all are answered once it returns (one replica: the same
thing), acks=0 not at all.

Transactions are not supported: a request with a transactional id, or a transactional or
control batch, is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED / INVALID_RECORD) and
changes nothing; InitProducerId with a transactional id is refused the same way.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId

from ...errors import CorruptBatchError, InvalidRecordError, KdelayError, LogWriteError
from .. import protocol
from ..answer_template import AnswerTemplate, template_or_none
from ..dispatcher import Api, RequestContext
from ..producer_state import ProducerStates, Verdict, expiration_ms
from ..responses import element, has, make
from ..wire_batch import BatchTooLargeError, open_batches

if TYPE_CHECKING:
    from ...partition import Log

log = logging.getLogger("kdelay.broker")

_RECORD_INDEX = re.compile(r"record (\d+): ")
_EPOCH = datetime.UTC
_MAX_TEMPLATES = 4096  # past it, made again as they are used (a cache, not a registry)


def producer_states(ctx: RequestContext) -> ProducerStates:
    """The broker's ProducerStates (made on first use; forgets deleted topics)."""
    states = getattr(ctx.broker, "producer_states", None)
    if states is None:
        states = ctx.broker.producer_states = ProducerStates(
            expiration_ms(ctx.broker.settings))
        ctx.broker.topics.add_listener(states.forget_topic)
    return states


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str, record: int | None = None):
        super().__init__(message)
        self.code, self.message, self.record = code, message, record


def _produce_partition(ctx: RequestContext, states: ProducerStates, topic_name: str,
                       index: int, records: bytes | None) -> tuple[int, int, int]:
    """(base offset, log start offset, append time or -1) of one partition's batches;
    _Refused when refused."""
    registry = ctx.broker.topics
    topic = registry.get(topic_name)
    if topic is None or not 0 <= index < topic.partitions:
        raise _Refused(ErrorCode.unknown_topic_or_partition,
                       f"no partition {index} of topic {topic_name!r}")
    if records is None:
        raise _Refused(ErrorCode.corrupt_message, "no records")
    configs = registry.configs(topic_name)
    assert configs is not None
    plog = topic.partition(index)
    cfg = plog.config
    try:
        batches = open_batches(records, max_bytes=cfg.max_batch_bytes,
                               delays_allowed=cfg.delayed_delivery_enable,
                               max_delay_ms=cfg.max_delivery_delay_ms)
    except BatchTooLargeError as e:
        raise _Refused(ErrorCode.message_too_large, str(e)) from None
    except CorruptBatchError as e:
        raise _Refused(ErrorCode.corrupt_message, str(e)) from None
    except InvalidRecordError as e:
        m = _RECORD_INDEX.match(str(e))
        raise _Refused(ErrorCode.invalid_record, str(e),
                       int(m.group(1)) if m else None) from None
    first_base, append_time = -1, -1
    for b in batches:
        base, appended_at = store_client_batch(states, topic_name, index, plog, b,
                                               configs.spread_ms, configs.log_append_time)
        if appended_at >= 0:
            append_time = appended_at if configs.log_append_time else -1
        if first_base < 0:
            first_base = base
    return first_base, plog.log_start_offset, append_time


def store_client_batch(states: ProducerStates, topic_name: str, index: int, plog: Log,
                       b: Any, spread_ms: int, log_append_time: bool) -> tuple[int, int]:
    """(base offset, append time) of one checked client batch (wire_batch.open_batches)
    stored in `plog`, or (its original base offset, -1) for an idempotent producer's
    duplicate; _Refused for a producer's sequence or epoch error."""
    if b.producer_id >= 0:
        verdict = states.check(topic_name, index, plog, b.producer_id, b.producer_epoch,
                               b.base_sequence, b.last_sequence)
        if isinstance(verdict, ErrorCode):
            raise _Refused(verdict, f"producer {b.producer_id} epoch {b.producer_epoch} "
                                    f"sequence {b.base_sequence}: {verdict.name}")
        if verdict[0] == Verdict.DUPLICATE:
            return verdict[1], -1
    result = plog.append_client_batch(
        b.records, spread_ms=spread_ms, log_append_time=log_append_time,
        producer=(b.producer_id, b.producer_epoch, b.base_sequence))
    if b.producer_id >= 0:
        states.appended(topic_name, index, plog, b.producer_id, b.producer_epoch,
                        b.base_sequence, b.last_sequence, result.base_offset,
                        result.append_time)
    states.after_append(topic_name, index, plog)
    return result.base_offset, result.append_time


def _one_partition_answer(ctx: RequestContext, topic_name: str, index: int
                          ) -> AnswerTemplate | None:
    """The answer of a Produce to one partition that succeeded, as a template of (base
    offset, append time or -1, log start offset); None where kio's encoding cannot be one
    (answer_template.py). Made once per API version, topic and partition (kept in
    BrokerState.produce_answers, up to _MAX_TEMPLATES)."""
    key = (ctx.api_version, topic_name, index)
    templates = ctx.broker.produce_answers
    if key in templates:
        return templates[key]
    if len(templates) >= _MAX_TEMPLATES:
        templates.clear()
    topic_cls = element(ctx.response_type, "responses")
    part_cls = element(topic_cls, "partition_responses")

    def make_answer(base: int, append_time: int, start: int) -> Any:
        part = make(part_cls, index=index, error_code=ErrorCode.none, base_offset=base,
                    log_append_time=datetime.datetime.fromtimestamp(append_time / 1000,
                                                                    _EPOCH),
                    log_start_offset=start, record_errors=(), error_message=None)
        return make(ctx.response_type, responses=(
            make(topic_cls, name=topic_name, partition_responses=(part,)),))
    template = templates[key] = template_or_none(protocol.schema(0, ctx.api_version),
                                                 make_answer, 3)
    return template


def _partition_result(ctx: RequestContext, states: ProducerStates, topic_name: str,
                      index: int, records: bytes | None,
                      refuse_all: tuple[ErrorCode, str] | None) -> tuple:
    """(index, error code, message, record errors, base offset, log start, append time or
    -1) of one partition of a Produce request, stored or refused."""
    code, message = ErrorCode.none, None
    record_errors: tuple = ()
    base, start, append_time = -1, -1, -1
    try:
        if refuse_all is not None:
            raise _Refused(*refuse_all)
        base, start, append_time = _produce_partition(ctx, states, topic_name, index,
                                                      records)
    except _Refused as e:
        log.debug("produce to %s-%d refused: %s", topic_name, index, e.message)
        code, message = e.code, e.message
        part_cls = element(element(ctx.response_type, "responses"), "partition_responses")
        if e.record is not None and has(part_cls, "record_errors"):
            record_errors = (make(element(part_cls, "record_errors"), batch_index=e.record,
                                  batch_index_error_message=e.message),)
    except LogWriteError as e:
        log.error("produce to %s-%d failed: %s", topic_name, index, e)
        code, message = ErrorCode.kafka_storage_error, str(e)
    except KdelayError as e:
        log.error("produce to %s-%d failed: %s", topic_name, index, e)
        code, message = ErrorCode.unknown_server_error, str(e)
    return index, code, message, record_errors, base, start, append_time


def _answer(ctx: RequestContext, results: list[tuple[str, list[tuple]]]) -> Any:
    """The kio response of every partition's result (_partition_result), by topic."""
    topic_cls = element(ctx.response_type, "responses")
    part_cls = element(topic_cls, "partition_responses")
    return make(ctx.response_type, responses=tuple(
        make(topic_cls, name=name, partition_responses=tuple(
            make(part_cls, index=index, error_code=code, base_offset=base,
                 log_append_time=None if append_time < 0 else
                 datetime.datetime.fromtimestamp(append_time / 1000, _EPOCH),
                 log_start_offset=start, record_errors=record_errors,
                 error_message=message)
            for index, code, message, record_errors, base, start, append_time in parts))
        for name, parts in results))


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    states = producer_states(ctx)
    refuse_all: tuple[ErrorCode, str] | None = None
    if request.transactional_id is not None:
        refuse_all = (ErrorCode.transactional_id_authorization_failed,
                      "transactions are not supported")
    elif request.acks not in (0, 1, -1):
        refuse_all = (ErrorCode.invalid_required_acks, f"acks={request.acks}")
    results = [(t.name, [_partition_result(ctx, states, t.name, p.index, p.records,
                                           refuse_all) for p in t.partition_data])
               for t in request.topic_data]
    if request.acks == 0:
        return None  # a producer with acks=0 expects no answer at all
    if len(results) == 1 and len(results[0][1]) == 1:  # the commonest shape
        index, code, _, _, base, start, append_time = results[0][1][0]
        if code == ErrorCode.none:
            template = _one_partition_answer(ctx, results[0][0], index)
            if template is not None:  # (kio's encoding, done once)
                return template.answer(ctx.header.correlation_id, base, append_time, start)
    return _answer(ctx, results)


class ProducerIds:
    """Producer ids, unique across restarts without a file: the wall clock in ms times
    1024, plus a counter, never below the last one handed out (a clock that steps back
    across a restart by more than the ids handed out since would be needed to repeat
    one)."""

    def __init__(self) -> None:
        self._last = -1

    def next(self) -> int:
        self._last = max(self._last + 1, int(time.time() * 1000) << 10)
        return self._last


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return make(ctx.response_type,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=ProducerId(-1), producer_epoch=-1)
    ids = getattr(ctx.broker, "producer_ids", None)
    if ids is None:
        ids = ctx.broker.producer_ids = ProducerIds()
    known_id = getattr(request, "producer_id", -1)
    known_epoch = getattr(request, "producer_epoch", -1)
    if known_id >= 0 and 0 <= known_epoch < 32766:  # a bump of an id it has (KIP-360)
        return make(ctx.response_type, error_code=ErrorCode.none,
                    producer_id=ProducerId(known_id), producer_epoch=known_epoch + 1)
    return make(ctx.response_type, error_code=ErrorCode.none,
                producer_id=ProducerId(ids.next()), producer_epoch=0)


APIS = [
    Api(0, 3, 10, handle_produce, name="Produce"),
    Api(22, 0, 4, handle_init_producer_id, name="InitProducerId"),
]
