"""A process's own memory as /proc/self shows it (stdlib only, so a measuring process can
take its baseline before importing anything it measures)."""

from __future__ import annotations


def memory_figures() -> dict[str, int]:
    """USS (the process's private pages: what it alone holds, as `smem` reports it),
    RssAnon (its anonymous resident memory) and RSS (every resident page, shared ones too:
    unlike USS, the same whatever other processes map the same libraries), bytes, from
    /proc/self."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        uss = 0
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:", "Private_Hugetlb:")):
                uss += int(line.split()[1]) * 1024
        out["uss"] = uss
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                out["rss_anon"] = int(line.split()[1]) * 1024
            elif line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
    return out
