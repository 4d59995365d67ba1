#!/usr/bin/env python3
"""Attributes a callgrind profile's instructions to the parts of the stack (issue 29, the
data-path diagnosis): the scheduler and I/O driver, hyper's HTTP/1 code, the client's
dispatch and pool, axum, headers, bytes, hashing, the allocator, copies, the standard
library, the project's own code.

    bench/attribute.py REQUESTS PROFILE [PROFILE ...]

Each PROFILE is a callgrind output file (bench/instructions.sh keeps them); REQUESTS is
how many requests the profiled run served, so the table is per request. The last line
counts calls into the allocator per request. TOP=N in the environment also lists the N
functions of the largest self cost, with their part (PART=regex keeps those of matching
parts), and the N functions that allocate most often. The self cost
of every function (callgrind_annotate --inclusive=no) goes to the first part whose
pattern matches its file and name; the order below decides between overlapping ones.
"""

import os
import re
import sys

# (part, pattern over the function's name, pattern over its file), first match wins: the
# name first (a generic function instantiated for hyper's types is hyper's work, wherever
# its code lives), then the file for what the name does not say.
PARTS = [
    ("copies (memcpy, memmove, memset)", r"mem(cpy|move|set|cmp)|bcmp", None),
    (
        "allocator (malloc, free, mimalloc)",
        r"malloc|_int_free|cfree|realloc|tcache|\bmi_|_mi_|__rust_(alloc|dealloc|realloc)|alloc::alloc::",
        r"mimalloc",
    ),
    ("hashing (SipHash, hashbrown)", r"core::hash|Hasher|hashbrown|BuildHasher", None),
    (
        "tokio scheduler",
        r"tokio::runtime::(scheduler|task|context|park|coop|blocking)",
        r"tokio-[\d.]+/src/runtime/(scheduler|task|context|park|coop|blocking)",
    ),
    (
        "tokio I/O driver and time",
        r"tokio::(runtime::(io|time|driver)|io|net|time)",
        r"tokio-[\d.]+/src/(runtime/(io|time|driver)|io|net|time)",
    ),
    ("tokio other", r"tokio::", r"tokio-[\d.]+/"),
    ("mio and epoll", r"mio::|epoll", r"mio-[\d.]+/"),
    ("hyper HTTP/1 parse and encode", r"hyper::proto::h1::(role|encode|decode|io)", None),
    ("hyper HTTP/1 connection state", r"hyper::proto::h1::(conn|dispatch)", None),
    ("hyper client dispatch (want, channels)", r"hyper::client|want::|hyper::common::watch", None),
    ("hyper body (Incoming)", r"hyper::body", None),
    ("hyper other", r"hyper::", r"hyper-[\d.]+/"),
    ("hyper-util client pool", r"hyper_util::client", None),
    ("hyper-util server and rt", r"hyper_util::", r"hyper-util-[\d.]+/"),
    ("httparse", r"httparse::", r"httparse-"),
    ("axum and tower", r"axum::|axum_core::|tower::|tower_http::|matchit::", r"/(axum|tower|matchit)"),
    ("http (headers, URI)", r"\bhttp::", r"/http-[\d.]+/"),
    ("bytes, http-body", r"bytes::|http_body::|http_body_util::", r"/(bytes|http-body)"),
    ("futures, channels", r"futures_", r"/futures-"),
    ("serde_json, serde", r"serde_json::|serde::|serde_core::", r"/serde"),
    ("tracing, prometheus", r"tracing::|tracing_core::|prometheus_client::", r"/(tracing|prometheus)"),
    ("SQLite (the request log's writes)", r"^sqlite3|^vdbe|^wal|^btree|^balance_|^getPage|^pager", r"sqlite3\.c"),
    ("SHA-256 (client key hashes)", r"sha2::", r"/sha2-"),
    ("rusqlite, postgres, redis clients", r"rusqlite::|postgres::|redis::", r"/(rusqlite|postgres|redis)-"),
    ("switchyard (the project's code)", r"switchyard|floor::", r"/crates/"),
    ("std, core, alloc (Rust library)", r"^(std|core|alloc)::|<(std|core|alloc)::", r"/rustc/"),
    ("libc and the loader (syscall wrappers, TLS)", r"__libc|syscall|pthread", r"libc\.so|ld-linux|libpthread|libgcc"),
]


def part_of(what):
    """The part a function is attributed to; `what` is `file:function [object]`."""
    file, _, name = what.partition(":")
    for part, by_name, _ in PARTS:
        if re.search(by_name, name):
            return part
    for part, _, by_file in PARTS:
        if by_file and re.search(by_file, file):
            return part
    return "other"


# The allocators' entry points: calls to them are the allocations (and reallocations).
ALLOCATES = re.compile(r"^(mi_malloc|mi_malloc_aligned|mi_zalloc|mi_zalloc_aligned|mi_realloc|mi_realloc_aligned|malloc|calloc|realloc)$")

NAMED = re.compile(r"^(c?)(fl|fi|fe|fn)=\((\d+)\)(?: (.*))?$")


def self_costs(profile):
    """The profile's total, its self costs as (cost, "file:function") pairs, and its
    calls into the allocator: every cost line of a function except those that follow a
    `calls=` line (the inclusive cost of a call, which is the callee's). Each cost goes
    to the file its instructions come from (`fi`/`fe` switch to an inlined function's
    file)."""
    names = {"fl": {}, "fn": {}}
    costs = {}
    total = 0
    allocations = {}
    callee = ""
    file = function = current_fl = "???"
    after_call = False
    with open(profile, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            if line[0].isdigit() or line[0] in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) > 1:
                    key = (file, function)
                    costs[key] = costs.get(key, 0) + int(fields[1])
                continue
            if line.startswith("calls="):
                after_call = True
                if ALLOCATES.match(callee) and not ALLOCATES.match(function):
                    key = f"{file}:{function}"
                    allocations[key] = allocations.get(key, 0) + int(line[6:].split()[0])
                continue
            if line.startswith("summary:") or line.startswith("totals:"):
                total = max(total, int(line.split()[1]))
                continue
            m = NAMED.match(line)
            if not m:
                continue
            called, kind, ident, name = m.group(1), m.group(2), m.group(3), m.group(4)
            table = names["fn" if kind == "fn" else "fl"]
            if name is not None:
                table[ident] = name
            if called:
                # `cfn`, `cfl`, `cfi`: the callee of the next call; names it only.
                if kind == "fn":
                    callee = table.get(ident, "???")
                continue
            if kind == "fn":
                function = table.get(ident, "???")
                file = current_fl
            else:
                file = table.get(ident, "???")
                if kind == "fl":
                    current_fl = file
    rows = [(cost, f"{fl}:{fn}") for (fl, fn), cost in costs.items()]
    return total, rows, allocations


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    requests = int(sys.argv[1])
    totals = {name: 0 for name, _, _ in PARTS}
    totals["other"] = 0
    grand = 0
    functions, allocations = {}, {}
    for profile in sys.argv[2:]:
        total, rows, allocated = self_costs(profile)
        grand += total
        for what, calls in allocated.items():
            allocations[what] = allocations.get(what, 0) + calls
        seen = 0
        for cost, what in rows:
            seen += cost
            part = part_of(what)
            totals[part] += cost
            functions[(part, what)] = functions.get((part, what), 0) + cost
        totals["other"] += total - seen
    print(f"{'part':48} {'instr/req':>10} {'share':>7}")
    for name, cost in sorted(totals.items(), key=lambda kv: -kv[1]):
        if cost:
            print(f"{name:48} {cost / requests:>10.0f} {100 * cost / grand:>6.1f}%", flush=True)
    print(f"{'total':48} {grand / requests:>10.0f}")
    print(f"{'allocations (calls into the allocator)':48} {sum(allocations.values()) / requests:>10.1f}")
    top, keep = int(os.environ.get("TOP", "0")), re.compile(os.environ.get("PART", ""))
    if top:
        print(f"\n{'instr/req':>10}  part: file:function")
        ranked = sorted(((c, p, w) for (p, w), c in functions.items() if keep.search(p)), reverse=True)
        for cost, part, what in ranked[:top]:
            print(f"{cost / requests:>10.0f}  {part}: {what[:160]}")
        print(f"\n{'allocs/req':>10}  allocating function (file:function)")
        for what, calls in sorted(allocations.items(), key=lambda kv: -kv[1])[:top]:
            print(f"{calls / requests:>10.2f}  {what[:160]}")


if __name__ == "__main__":
    main()
