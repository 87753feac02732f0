"""What a classic group coordinator call costs as the broker's groups grow: the same calls
with 10, 1,000 and 10,000 Stable groups (two members each) in one coordinator, side by side
in one run (medians of rounds), on an injected clock so that only the state machine is
timed: a heartbeat, an OffsetCommit's membership check, a follower's JoinGroup that changes
nothing, a static member back under a new member id (no rebalance), and a session expiry
that starts a rebalance (with the timer heap holding every group's sessions).

    python bench/group_coordinator.py [--rounds 5] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from kdelay.broker.groups.coordinator import GroupCoordinator

PROTOCOLS = [("range", b"subscription")]
SESSION_MS = 10_000


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def stable_groups(n: int) -> tuple[GroupCoordinator, Clock, list[tuple[str, str, str]]]:
    """n Stable groups of two static members; (group, leader id, follower id) each."""
    clock = Clock()
    c = GroupCoordinator(0, clock=clock)
    out = []
    for i in range(n):
        gid = f"group-{i}"
        got: list = []
        c.join(gid, "", "a", "consumer", PROTOCOLS, SESSION_MS, SESSION_MS, "c", "h",
               got.append)
        c.sync(gid, 1, got[0].member_id, "a", {}, got.append)
        c.join(gid, "", "b", "consumer", PROTOCOLS, SESSION_MS, SESSION_MS, "c", "h",
               got.append)  # waits: the leader must join again
        c.join(gid, got[0].member_id, "a", "consumer", PROTOCOLS, SESSION_MS, SESSION_MS,
               "c", "h", got.append)
        leader, follower = got[2], got[3]
        if leader.member_id != leader.leader:
            leader, follower = follower, leader
        c.sync(gid, 2, leader.member_id, None, {}, got.append)
        out.append((gid, leader.member_id, follower.member_id))
    return c, clock, out


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - start) / calls * 1e6


def measure(n: int, calls: int) -> dict[str, float]:
    c, clock, groups = stable_groups(n)
    picks = [groups[(i * 7919) % n] for i in range(calls)]
    out = {}
    out["heartbeat"] = per_call_us(
        lambda i: c.heartbeat(picks[i][0], 2, picks[i][2], None), calls)
    out["commit check"] = per_call_us(
        lambda i: c.commit_error(picks[i][0], picks[i][2], None, 2), calls)
    sink: list = []
    out["follower join, unchanged"] = per_call_us(
        lambda i: c.join(picks[i][0], picks[i][2], None, "consumer", PROTOCOLS, SESSION_MS,
                         SESSION_MS, "c", "h", sink.append), calls)

    def static_back(i: int) -> None:
        gid = picks[i][0]
        c.join(gid, "", "b" if c.groups[gid].static["a"] == c.groups[gid].leader else "a",
               "consumer", PROTOCOLS, SESSION_MS, SESSION_MS, "c", "h", sink.append)
    out["static member back"] = per_call_us(static_back, calls)
    # every session runs out at once: each expiry removes a member and starts a rebalance
    clock.now += SESSION_MS * 2
    start = time.perf_counter()
    fired = c.run_due()
    out["session expiry"] = (time.perf_counter() - start) / max(fired, 1) * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    sizes = (10, 1_000, 10_000)
    results: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    for _ in range(args.rounds):
        for n in sizes:  # interleaved: the machine's load falls on every size alike
            results[n].append(measure(n, args.calls))
    names = list(results[sizes[0]][0])
    print(f"{'µs per call (median of ' + str(args.rounds) + ')':32}"
          + "".join(f"{n:>12,} groups" for n in sizes) + "   ratio 10k/10")
    for name in names:
        med = [statistics.median(r[name] for r in results[n]) for n in sizes]
        print(f"{name:32}" + "".join(f"{m:>19.2f}" for m in med) + f"{med[-1] / med[0]:>15.2f}")


if __name__ == "__main__":
    main()
