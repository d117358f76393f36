"""Where an operator's memory goes: runs `python -m torchjob ARGS` (the operator) in this process
and, on SIGUSR1, writes a JSON report to --out: the process's RSS and peak, and for each informer
cache it finds (by duck typing, through gc: an object of a class named `Informer` with a `kind` and
a `cache` dict, wherever the class lives) how many objects it holds, their deep size (every
object reachable from the cache counted once), and the bytes by field (top-level keys, and the keys
of `metadata` and `status`), plus what the rest of the live Python objects weigh by type.

    python bench/operator_memory.py --out FILE -- -m torchjob operator --kubeconfig ...

(bench/operator_scale.py --profile-memory runs its torchjob operator so, and signals it once every
job is Running, after it has read the operator's peak RSS.) With BENCH_TRACEMALLOC=1 the report
also has tracemalloc's biggest allocation sites (which doubles the operator's memory).
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import signal
import sys
import time
import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of obj and of everything it holds (dicts, lists, tuples, strings, numbers) not yet in
    `seen`."""
    size = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        size += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset):
            stack.extend(o)
    return size


def by_field(objs: list[dict[str, Any]]) -> dict[str, int]:
    """Bytes by field over all objects: `key` for a top-level field, `metadata.key`, `status.key`
    (each field's values counted once across objects; the dicts that hold them as `{}`)."""
    seen: set[int] = set()
    sizes: Counter[str] = Counter()
    for o in objs:
        for key, value in o.items():
            if key in ("metadata", "status") and isinstance(value, dict):
                sizes[f"{key}{{}}"] += deep_size(key, seen)
                if id(value) not in seen:
                    seen.add(id(value))
                    sizes[f"{key}{{}}"] += sys.getsizeof(value)
                for k, v in value.items():
                    sizes[f"{key}.{k}"] += deep_size(k, seen) + deep_size(v, seen)
            else:
                sizes[key] += deep_size(key, seen) + deep_size(value, seen)
        if id(o) not in seen:
            seen.add(id(o))
            sizes["{}"] += sys.getsizeof(o)
    return dict(sizes.most_common())


def by_json_field(blobs: Any) -> dict[str, int]:
    """Bytes of JSON text by field over packed objects (`rv|{json}`, the JSON maybe deflated): top-level
    keys, and the keys of `metadata` and `status` (of the JSON as written out, before deflating)."""
    sizes: Counter[str] = Counter()
    for blob in blobs:
        body = blob[blob.index(b"|") + 1:]
        obj = json.loads(body if body[:1] == b"{" else zlib.decompress(body))  # deflated (informer.Packed)
        for key, value in obj.items():
            if key in ("metadata", "status") and isinstance(value, dict):
                for k, v in value.items():
                    sizes[f"{key}.{k}"] += len(json.dumps(v, separators=(",", ":"))) + len(k) + 4
            else:
                sizes[key] += len(json.dumps(value, separators=(",", ":"))) + len(key) + 4
    return dict(sizes.most_common())


def status_kb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    return 0.0


def report(out: Path) -> None:
    t0 = time.perf_counter()
    data: dict[str, Any] = {"rss_mb": status_kb("VmRSS") / 1024, "peak_mb": status_kb("VmHWM") / 1024,
                            "informers": [], "other_by_type": {}}
    in_caches: set[int] = set()
    informers = [o for o in gc.get_objects()
                 if type(o).__name__ == "Informer" and isinstance(getattr(o, "cache", None), Mapping)]
    for inf in informers:
        cache: Mapping[Any, Any] = inf.cache
        seen: set[int] = set()
        blobs = getattr(cache, "_blobs", None)  # a cache of packed objects (bytes), read back as dicts
        if isinstance(blobs, dict):
            total = deep_size(blobs, seen) + sys.getsizeof(cache)
            fields = {f"{k} (JSON)": v for k, v in by_json_field(blobs.values()).items()}
        else:
            total = deep_size(cache, seen)
            fields = by_field([o for o in cache.values() if isinstance(o, dict)])
        in_caches |= seen
        seen.clear()
        data["informers"].append({
            "kind": str(getattr(inf, "kind", "?")), "objects": len(cache), "mb": total / 2**20,
            "bytes_per_object": total / len(cache) if cache else 0,
            "by_field_mb": {k: v / 2**20 for k, v in fields.items()},
        })
    by_type: Counter[str] = Counter()
    count: Counter[str] = Counter()
    mine = {id(in_caches), id(informers), id(data)}  # this report's own
    for o in gc.get_objects():
        if id(o) in in_caches or id(o) in mine:
            continue
        by_type[type(o).__name__] += sys.getsizeof(o)
        count[type(o).__name__] += 1
    data["other_by_type"] = {t: {"mb": n / 2**20, "objects": count[t]} for t, n in by_type.most_common(15)}
    try:
        import tracemalloc

        if tracemalloc.is_tracing():
            stats = tracemalloc.take_snapshot().statistics("lineno")[:25]
            data["tracemalloc_top"] = [{"where": str(s.traceback), "mb": s.size / 2**20, "blocks": s.count}
                                       for s in stats]
    except Exception as e:  # a report without it
        data["tracemalloc_error"] = repr(e)
    data["report_s"] = time.perf_counter() - t0
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.rename(out)


def main() -> None:
    argv = sys.argv[1:]
    if len(argv) < 4 or argv[0] != "--out" or argv[2] != "--" or argv[3] != "-m":
        sys.exit(__doc__)
    out, module, args = Path(argv[1]), argv[4], argv[5:]
    if os.environ.get("BENCH_TRACEMALLOC") == "1":
        import tracemalloc

        tracemalloc.start()
    signal.signal(signal.SIGUSR1, lambda *_: report(out))
    sys.argv = [module, *args]
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this script's directory
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
