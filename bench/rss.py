"""Drives waves of concurrent streaming requests at a gateway and samples its memory.

Usage: rss.py PID HOST PORT TOKEN MODEL UPSTREAM_PORT WAVES CONCURRENCY IDLE_S SETTLE_S

Each wave opens CONCURRENCY connections at once, each sending one streaming chat request
(`Connection: close`) and reading the answer to its end; the wave ends when every stream
has. Memory is read from /proc/PID: before the first wave (idle), the highest VmRSS seen
while a wave runs (peak, sampled every 10 ms), right after the wave ends, and after IDLE_S
seconds without traffic; after the last wave once more after SETTLE_S further seconds
(0 = skip). Prints one table row per sample: VmRSS, its anonymous part, the part of that
in transparent huge pages, the high-water mark, threads, and the established TCP
connections to UPSTREAM_PORT (the gateway's pooled upstream connections).
"""
import asyncio
import json
import os
import sys
import time

pid, host, port, token, model, upstream_port = sys.argv[1:7]
waves, concurrency, idle_s, settle_s = map(int, sys.argv[7:11])
port, upstream_port = int(port), int(upstream_port)

body = json.dumps({
    "model": model,
    "stream": True,
    "messages": [{"role": "user", "content": "memory benchmark"}],
}).encode()
request = (
    f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
    f"authorization: Bearer {token}\r\ncontent-type: application/json\r\n"
    f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
).encode() + body


def status():
    """The numeric fields of /proc/PID/status (sizes in KiB)."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            first = value.split()[:1]
            if first and first[0].isdigit():
                fields[name] = int(first[0])
    return fields


def huge_pages_kib():
    """Anonymous memory in transparent huge pages (2 MiB each, resident as a whole)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    return 0


def upstream_connections():
    """Established TCP connections to the upstream port (the gateway's pooled ones)."""
    count = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == upstream_port:
                    count += 1
    return count


def mib(kib):
    return f"{kib / 1024:.1f}"


HEADER = ("sample", "RSS MiB", "anon MiB", "THP MiB", "HWM MiB", "threads", "upstream conns", "streams ok")
print(f"{HEADER[0]:<22} {HEADER[1]:>8} {HEADER[2]:>9} {HEADER[3]:>8} {HEADER[4]:>8} {HEADER[5]:>8} "
      f"{HEADER[6]:>15} {HEADER[7]:>11}")


def row(label, peak=None, ok=""):
    now = status()
    rss, anon = peak or (now["VmRSS"], now["RssAnon"])
    print(f"{label:<22} {mib(rss):>8} {mib(anon):>9} {mib(huge_pages_kib()):>8} "
          f"{mib(now['VmHWM']):>8} {now['Threads']:>8} "
          f"{upstream_connections():>15} {ok:>11}", flush=True)


async def stream_once():
    """One streaming request on its own connection; True when it ended with [DONE]."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        await writer.drain()
        answer = await reader.read(-1)
        writer.close()
        return answer.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in answer
    except OSError:
        return False


async def wave():
    peak = (0, 0)
    done = asyncio.Event()

    async def sample():
        nonlocal peak
        while not done.is_set():
            now = status()
            peak = max(peak, (now["VmRSS"], now["RssAnon"]))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(*(stream_once() for _ in range(concurrency)))
    done.set()
    await sampler
    return peak, sum(results)


async def main():
    row("idle (start)")
    failed = 0
    for n in range(1, waves + 1):
        started = time.monotonic()
        peak, ok = await wave()
        failed += concurrency - ok
        row(f"wave {n} peak", peak, ok=f"{ok}/{concurrency}")
        row(f"wave {n} ended ({time.monotonic() - started:.1f} s)")
        await asyncio.sleep(idle_s)
        row(f"wave {n} +{idle_s} s idle")
    if settle_s > 0:
        await asyncio.sleep(settle_s)
        row(f"+{settle_s} s more idle")
    if failed:
        sys.exit(f"{failed} streams failed")


asyncio.run(main())
