#!/usr/bin/env bash
# benches/stuck-h2-readers.sh BINARY LABEL: a POSIX log with one full bundle of 256 x 60 kB entries
# (15 MB), then h2load with 64 h2c connections x 100 streams, every window 0 (-w 0 -W 0),
# never read; the daemon's RSS and open connections at 10, 20, 40 and 60 s.

set -u
bin=$1; label=$2
w=$(mktemp -d); port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$bin keygen --origin rss.example/log --out $w/key >/dev/null 2>&1
$bin serve --backend posix --storage-dir $w/log --origin rss.example/log --private-key-file $w/key --listen 127.0.0.1:$port --metrics-listen "" --no-dedup 2>$w/log.txt &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/checkpoint >/dev/null && break; sleep 0.1; done
python3 - $port <<'PY'
import sys, urllib.request, concurrent.futures, os
port=sys.argv[1]
def add(i):
    body=os.urandom(60000)
    return urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/add", data=body, method="POST")).read()
with concurrent.futures.ThreadPoolExecutor(32) as ex: list(ex.map(add, range(256)))
PY
sleep 1.5
curl -s -o /dev/null -w "bundle %{http_code} %{size_download} bytes\n" http://127.0.0.1:$port/tile/entries/000
rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/$pid/status; }
echo "$label before: $(rss)"
timeout 90 h2load -c 64 -m 100 -w 0 -W 0 -n 6400 -t 1 http://127.0.0.1:$port/tile/entries/000 > $w/h2.txt 2>&1 &
h=$!
for t in 10 20 40 60; do sleep $((t - ${prev:-0})); prev=$t; echo "$label t=${t}s rss $(rss) conns $(ss -Htn state established "( sport = :$port )" | wc -l)"; done
kill $h 2>/dev/null; wait $h 2>/dev/null
grep -E "requests:|status codes" $w/h2.txt
kill $pid; rm -rf $w
