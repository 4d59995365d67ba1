"""Measures time to first byte of streaming chat responses over one keep-alive connection.

Usage: ttfb.py HOST PORT PATH TOKEN MODEL COUNT
Prints the median and p90 in milliseconds, space separated.
"""
import http.client
import json
import statistics
import sys
import time

host, port, path, token, model, count = sys.argv[1:7]
body = json.dumps({
    "model": model,
    "stream": True,
    "messages": [{"role": "user", "content": "benchmark"}],
})
headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
conn = http.client.HTTPConnection(host, int(port))
samples = []
for i in range(int(count) + 20):
    start = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    resp.read(1)
    first = time.perf_counter()
    resp.read()
    if resp.status != 200:
        sys.exit(f"status {resp.status}")
    if i >= 20:  # warm-up
        samples.append((first - start) * 1000)
samples.sort()
print(f"{statistics.median(samples):.3f} {samples[int(len(samples) * 0.9)]:.3f}")
