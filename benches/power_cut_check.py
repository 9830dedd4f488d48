#!/usr/bin/env python3
"""Writer and checker of benches/power-cuts.sh (Python 3 standard library only).

  power_cut_check.py write URL ACKED_FILE STOP_FILE WRITERS TAG
      POST distinct entries to URL/add from WRITERS threads until STOP_FILE exists;
      append "index<TAB>entry" to ACKED_FILE for every 200 answer (an acknowledged
      entry: tlogd returned its index, so it must survive any crash). One add in
      eight resends an entry this writer had acknowledged (a duplicate under load:
      it must get the same index; a wrong one is appended to ACKED_FILE.wrong), and
      two readers fetch the checkpoint and the bundles it names all along, keeping
      the newest checkpoint in ACKED_FILE.checkpoint (for `tlogd verify
      --earlier-checkpoint`: the tree after the cut must extend it).
  power_cut_check.py check URL ACKED_FILE MIN_SIZE
      After the restart: the checkpoint's size is at least MIN_SIZE (it never went
      back) and covers every acknowledged index; every acknowledged entry is at its
      index in the entry bundles; 32 acknowledged entries sent again get their original
      index back (the dedup index caught up). Prints one JSON line; exit 1 on a loss.
"""

import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse


def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=10)


def write(url, acked_file, stop_file, writers, tag):
    lock = threading.Lock()
    out = open(acked_file, "a", buffering=1)

    wrong = open(acked_file + ".wrong", "a", buffering=1)

    def worker(w):
        c = conn(url)
        n = 0
        mine = []
        while not os.path.exists(stop_file):
            resend = mine and random.random() < 0.125
            if resend:
                want, entry = random.choice(mine)
            else:
                entry = f"{tag} writer {w} entry {n} {random.getrandbits(64):016x}"
                n += 1
            try:
                c.request("POST", "/add", body=entry.encode())
                r = c.getresponse()
                body = r.read().decode(errors="replace").strip()
            except Exception:
                c.close()
                c = conn(url)
                time.sleep(0.01)
                continue
            if r.status == 200 and resend:
                if body != want:
                    with lock:
                        wrong.write(f"{want}\t{body}\t{entry}\n")
            elif r.status == 200:
                mine.append((body, entry))
                with lock:
                    out.write(f"{body}\t{entry}\n")
            else:
                time.sleep(0.005)

    def reader():
        c = conn(url)
        while not os.path.exists(stop_file):
            try:
                status, body = get(c, "/checkpoint")
                if status == 200:
                    size = int(body.decode().split("\n")[1])
                    tmp = acked_file + f".checkpoint.{threading.get_ident()}"
                    with open(tmp, "wb") as f:
                        f.write(body)
                    with lock:
                        os.replace(tmp, acked_file + ".checkpoint")
                    if size:
                        n = random.randrange(0, (size + 255) // 256)
                        width = min(256, size - n * 256)
                        path = f"/tile/entries/{tile_path(n)}"
                        get(c, path + ("" if width == 256 else f".p/{width}"))
            except Exception:
                c.close()
                c = conn(url)
            time.sleep(0.02)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(writers)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def get(c, path):
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read()


def bundle_entries(data):
    """Split a tlog-tiles entry bundle: 16-bit big-endian length, then the bytes."""
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i : i + 2], "big")
        out.append(data[i + 2 : i + 2 + n])
        i += 2 + n
    return out


def tile_path(n):
    """tlog-tiles path element of index n: 3-digit groups, all but the last "x"-prefixed."""
    s = str(n)
    s = s.zfill(((len(s) + 2) // 3) * 3)
    groups = [s[i : i + 3] for i in range(0, len(s), 3)]
    return "/".join(["x" + g for g in groups[:-1]] + [groups[-1]])


def check(url, acked_file, min_size):
    acked = []
    with open(acked_file) as f:
        for line in f:
            idx, _, entry = line.rstrip("\n").partition("\t")
            if idx.isdigit():
                acked.append((int(idx), entry))
    c = conn(url)
    top = max((i for i, _ in acked), default=-1)
    # A restarted server may serve its old checkpoint until it publishes the next one
    # (Tessera publishes on an interval): wait up to 10 s for one covering every
    # acknowledged index before calling anything lost.
    deadline = time.time() + 10
    while True:
        status, body = get(c, "/checkpoint")
        if status != 200:
            print(json.dumps({"ok": False, "why": f"checkpoint: HTTP {status}"}))
            return 1
        size = int(body.decode().split("\n")[1])
        if size > top or time.time() > deadline:
            break
        time.sleep(0.2)
    result = {"acked": len(acked), "size": size, "min_size": min_size}
    problems = []
    if size < min_size:
        problems.append(f"the checkpoint went back: {size} < {min_size}")
    if top >= size:
        problems.append(f"acknowledged index {top} is beyond the tree of size {size}")
    bundles = {}
    lost = 0
    for idx, entry in acked:
        if idx >= size:
            lost += 1
            continue
        n = idx // 256
        if n not in bundles:
            width = min(256, size - n * 256)
            path = f"/tile/entries/{tile_path(n)}" + ("" if width == 256 else f".p/{width}")
            st, data = get(c, path)
            if st != 200:
                problems.append(f"{path}: HTTP {st}")
                bundles[n] = []
            else:
                bundles[n] = bundle_entries(data)
        got = bundles[n][idx % 256] if idx % 256 < len(bundles[n]) else None
        if got != entry.encode():
            lost += 1
    if lost:
        problems.append(f"{lost} acknowledged entries not at their index")
    resent_wrong = 0
    for idx, entry in random.sample(acked, min(32, len(acked))):
        c.request("POST", "/add", body=entry.encode())
        r = c.getresponse()
        body = r.read().decode(errors="replace").strip()
        if r.status != 200 or body != str(idx):
            resent_wrong += 1
    if resent_wrong:
        problems.append(f"{resent_wrong} of 32 resubmitted entries did not get their index")
    try:
        with open(acked_file + ".wrong") as f:
            dupes_wrong = sum(1 for _ in f)
    except FileNotFoundError:
        dupes_wrong = 0
    if dupes_wrong:
        problems.append(f"{dupes_wrong} duplicates sent under load got another index")
    result.update(ok=not problems, lost=lost, problems=problems)
    print(json.dumps(result))
    return 0 if not problems else 1


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], int(sys.argv[4])))
