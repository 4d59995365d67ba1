"""The verdict of a soak run (bench/soak.sh): reads what the run left in its work
directory, asks the gateway for its in-flight gauge, request log and quota pool once the
load is over, prints one table row per figure with its gate, and exits 1 when a gate
fails.

Usage: soak.py WORK PORT ADMIN_TOKEN STARTED ENDED SECONDS CHUNKS "KEYS" "HEADING"

WORK holds oha-gw-KEY-KIND.json (KIND stream or plain) and oha-mock-KIND.json (oha's JSON
output), body-KIND.json (the bodies sent), and samples.txt (lines "unix-time rss-KiB
fds"). STARTED and ENDED are the Unix times around the load, SECONDS its length, CHUNKS
the words of the mock's answer. The gates come from the environment (soak.sh sets them):
ADDED_P95_MS, ERROR_RATE_MAX, RSS_GROWTH_MIB, FD_MAX, FD_GROWTH_MAX.
"""
import json
import math
import os
import sys
import time
import urllib.request

work, port, admin = sys.argv[1], int(sys.argv[2]), sys.argv[3]
started, ended, seconds = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
chunks, keys, heading = int(sys.argv[7]), sys.argv[8].split(), sys.argv[9]
gate = {name: float(os.environ[name]) for name in
        ("ADDED_P95_MS", "ERROR_RATE_MAX", "RSS_GROWTH_MIB", "FD_MAX", "FD_GROWTH_MAX")}
KINDS = ("plain", "stream")
base = f"http://127.0.0.1:{port}"


def get(path, admin_token=True):
    request = urllib.request.Request(base + path)
    if admin_token:
        request.add_header("authorization", f"Bearer {admin}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def oha(name):
    with open(f"{work}/oha-{name}.json") as f:
        return json.load(f)


def sent(run):
    """Requests oha sent: every answer by status, and every request that got none."""
    return sum(run["statusCodeDistribution"].values()) + sum(run["errorDistribution"].values())


def ok(run):
    return run["statusCodeDistribution"].get("200", 0)


def p95_ms(run, which="latencyPercentiles"):
    return run[which]["p95"] * 1000


def metric(text, name):
    """The sum of a metric's samples over all its label sets (0 when it has none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


def prompt_tokens(body):
    """The mock's prompt tokens: message characters / 4, rounded up, at least 1."""
    chars = sum(len(m["content"]) for m in body["messages"])
    return max(1, math.ceil(chars / 4))


def poll(read, done, limit_s):
    """Reads until `done(value)` or `limit_s` seconds have passed; the last value."""
    deadline = time.monotonic() + limit_s
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


rows, failed = [], []


def row(figure, value, gate_text="", passed=None):
    verdict = "" if passed is None else ("PASS" if passed else "FAIL")
    if passed is False:
        failed.append(figure)
    rows.append((figure, value, gate_text, verdict))


gw = {(k, kind): oha(f"gw-{k}-{kind}") for k in keys for kind in KINDS}
mock = {kind: oha(f"mock-{kind}") for kind in KINDS}
total = sum(sent(r) for r in gw.values())
served = sum(ok(r) for r in gw.values())

row("requests sent to the gateway", f"{total} ({total / seconds:.1f}/s)")
for kind in KINDS:
    worst = max(p95_ms(gw[k, kind]) for k in keys)
    upstream = p95_ms(mock[kind])
    label = "streaming" if kind == "stream" else "non-streaming"
    row(f"{label} p95: gateway (worst key) / mock", f"{worst:.1f} / {upstream:.1f} ms")
    row(f"{label} p95 added", f"{worst - upstream:+.1f} ms", f"<= {gate['ADDED_P95_MS']:g} ms",
        worst - upstream <= gate["ADDED_P95_MS"])
worst_ttfb = max(p95_ms(gw[k, "stream"], "firstBytePercentiles") for k in keys)
row("streaming first-byte p95 added",
    f"{worst_ttfb - p95_ms(mock['stream'], 'firstBytePercentiles'):+.1f} ms")
errors = total - served
row("errors (not 200, or no answer)", f"{errors} ({errors / max(1, total):.4%})",
    f"<= {gate['ERROR_RATE_MAX']:.2%}", errors <= gate["ERROR_RATE_MAX"] * total)
mock_errors = sum(sent(r) - ok(r) for r in mock.values())
row("errors straight from the mock (control)", str(mock_errors), "0", mock_errors == 0)

# Memory and descriptors: the peaks of the first and the last window of the load.
samples = []
with open(f"{work}/samples.txt") as f:
    for line in f:
        cols = line.split()
        if len(cols) == 3:
            samples.append((float(cols[0]), int(cols[1]), int(cols[2])))
window = 60 if seconds >= 300 else seconds / 4
first = [s for s in samples if started <= s[0] <= started + window]
last = [s for s in samples if ended - window <= s[0] <= ended]
idle = [s for s in samples if s[0] < started]
if first and last and idle:
    rss_first, rss_last = max(s[1] for s in first) / 1024, max(s[1] for s in last) / 1024
    row(f"RSS idle / first {window:g} s / last {window:g} s (peaks)",
        f"{idle[-1][1] / 1024:.1f} / {rss_first:.1f} / {rss_last:.1f} MiB")
    # Below a minute the first window is mostly oha opening its connections: no verdict.
    growth_gated = seconds >= 60
    ungated = "none below 60 s"
    row("RSS growth, first to last window", f"{rss_last - rss_first:+.1f} MiB",
        f"<= {gate['RSS_GROWTH_MIB']:g} MiB" if growth_gated else ungated,
        rss_last - rss_first <= gate["RSS_GROWTH_MIB"] if growth_gated else None)
    fd_first, fd_last = max(s[2] for s in first), max(s[2] for s in last)
    fd_peak = max(s[2] for s in samples if s[0] <= ended)
    row("open fds: idle / first / last window", f"{idle[-1][2]} / {fd_first} / {fd_last}")
    row("open fds, highest", str(fd_peak), f"<= {gate['FD_MAX']:g}", fd_peak <= gate["FD_MAX"])
    row("open fds growth, first to last window", f"{fd_last - fd_first:+d}",
        f"<= {gate['FD_GROWTH_MAX']:g}" if growth_gated else ungated,
        fd_last - fd_first <= gate["FD_GROWTH_MAX"] if growth_gated else None)
else:
    row("RSS and fd samples", f"{len(samples)} samples, too few", "one per second", False)

# After the load: nothing in flight, one log row per request, the pool's books balanced.
in_flight = poll(lambda: metric(get("/metrics", False), "switchyard_requests_in_flight"),
                 lambda v: v == 0, 10)
row("in-flight gauge after the load", f"{in_flight:g}", "0", in_flight == 0)
reservations = metric(get("/metrics", False), "switchyard_quota_reservations_open")
row("quota reservations open after the load", f"{reservations:g}", "0", reservations == 0)
stats = poll(lambda: json.loads(get("/api/logs/stats")), lambda s: s["rows"] >= total, 30)
row("request-log rows", str(stats["rows"]), f"= {total} sent", stats["rows"] == total)
metrics = get("/metrics", False)
dropped = metric(metrics, "switchyard_request_log_dropped_total")
row("request-log rows dropped", f"{dropped:g}", "0", dropped == 0)
unmetered = metric(metrics, "switchyard_quota_unmetered_total")
row("requests let through unmetered", f"{unmetered:g}", "0", unmetered == 0)
newest = json.loads(get("/api/logs?limit=1000"))
by_connection = {c: sum(r["connection_id"] == c for r in newest) for c in ("soak-1", "soak-2")}
row(f"connections of the newest {len(newest)} rows: soak-1 / soak-2",
    f"{by_connection['soak-1']} / {by_connection['soak-2']}")

bodies = {}
for kind in KINDS:
    with open(f"{work}/body-{kind}.json") as f:
        bodies[kind] = json.load(f)
per_answer = {kind: prompt_tokens(bodies[kind]) + chunks for kind in KINDS}
usage = json.loads(get("/api/quota/pools/soak/usage"))
consumed = {(d["unit"], u["apiKeyId"]): u["consumed"] for d in usage["dimensions"] for u in d["keys"]}
for k in keys:
    want_requests = sum(ok(gw[k, kind]) for kind in KINDS)
    want_tokens = sum(ok(gw[k, kind]) * per_answer[kind] for kind in KINDS)
    got_requests = consumed.get(("requests", k), 0)
    got_tokens = consumed.get(("tokens", k), 0)
    row(f"pool requests consumed, {k}", f"{got_requests:g}", f"= {want_requests} answered",
        got_requests == want_requests)
    row(f"pool tokens consumed, {k}", f"{got_tokens:g}", f"= {want_tokens} in their usage",
        got_tokens == want_tokens)

print(f"\nSwitchyard soak — {heading}; {seconds} s, {served} of {total} requests answered 200")
widths = [max(len(r[i]) for r in rows + [("figure", "value", "gate", "result")]) for i in range(4)]
for r in [("figure", "value", "gate", "result")] + rows:
    print(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip())
if failed:
    sys.exit(f"\n{len(failed)} gate(s) failed: {'; '.join(failed)}")
print("\nevery gate passed")
