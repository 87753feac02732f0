"""Codec cost per batch shape: ns per record to encode and to decode each shape a producer
sends (the shapes of bench/test_bench_micro.py), and each against the homogeneous shape of
the same batch size (the issue's bound is 1.3x).

Thread CPU time, best of `--passes` round-robin passes (every shape once per pass, so slow
moments of a shared machine hit all shapes alike).

    python bench/codec_shapes.py [--passes 15] [--out bench/results/codec_shapes.md]
"""

from __future__ import annotations

import argparse
import time

from test_bench_micro import CODEC_SHAPES, shape_batch

from kdelay.log.batch import codec

SIZES = [1, 10, 100, 1000]


def per_record_ns(fn, n: int, budget_s: float = 0.02) -> float:
    """CPU ns per record of `fn()`, over enough calls to fill about `budget_s`."""
    calls = max(1, int(budget_s * 1e9 / max(n * 200, 1)))
    t = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - t) / calls / n


def measure(passes: int) -> dict[tuple[int, str], tuple[float, float]]:
    cases = {}
    for n in SIZES:
        for shape in CODEC_SHAPES:
            kw = shape_batch(shape, n)
            batch = codec.encode_batch(base_offset=0, deliver_after=kw["base_timestamp"], **kw)
            header = codec.parse_header(batch)
            cases[(n, shape)] = (
                lambda kw=kw: codec.encode_batch(base_offset=0,
                                                 deliver_after=kw["base_timestamp"], **kw),
                lambda b=batch, h=header: codec.decode_records(b, h))
    best = {k: [float("inf"), float("inf")] for k in cases}
    for _ in range(passes):
        for (n, shape), (enc, dec) in cases.items():
            best[(n, shape)][0] = min(best[(n, shape)][0], per_record_ns(enc, n))
            best[(n, shape)][1] = min(best[(n, shape)][1], per_record_ns(dec, n))
    return {k: (v[0], v[1]) for k, v in best.items()}


def table(results: dict[tuple[int, str], tuple[float, float]]) -> str:
    lines = ["| n | shape | encode ns/rec | decode ns/rec |", "|---|---|---|---|"]
    for n in SIZES:
        enc0, dec0 = results[(n, "homogeneous")]
        for shape in CODEC_SHAPES:
            enc, dec = results[(n, shape)]
            lines.append(f"| {n} | {shape} | {enc:.0f} (x{enc / enc0:.2f}) | "
                         f"{dec:.0f} (x{dec / dec0:.2f}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    text = table(measure(args.passes))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("## Codec cost per batch shape, ns per record (x = over the homogeneous "
                    "shape of the same n)\n\nMade by `bench/codec_shapes.py` (thread CPU "
                    f"time, best of {args.passes} round-robin passes).\n\n" + text + "\n")


if __name__ == "__main__":
    main()
