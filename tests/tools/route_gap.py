#!/usr/bin/env python3
"""A put made through a cluster server that has just started can ring no
doorbell at a subscriber on another server (docs/protocol.md, section 7).

Three nats-servers form a JetStream cluster on loopback with an R3 stream
shaped like the wanted bucket's (`$KV.w.>`, direct gets). The stream is led
by the second server; a subscriber on the third listens on one key's
subject, as a hive does. Each round kills the first server, starts it again
on the same store, connects a client to it alone as soon as it answers a
stream info, puts the key through it, and records whether the subscriber
heard the put (waiting 1 s) and whether a direct get through the third
server found it at once. Every put is stored (its ack is awaited).

    python3 tests/tools/route_gap.py --rounds 25 --busy 2

`--busy N` keeps N processes spinning meanwhile (a loaded machine). Prints
one line per round and a summary; every server and spinner it started is
stopped and its directory removed, also on failure or Ctrl-C.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time

import nats


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spin():
    while True:
        pass


class Cluster:
    def __init__(self, root):
        self.root = root
        self.client_ports = [free_port() for _ in range(3)]
        self.route_ports = [free_port() for _ in range(3)]
        self.procs = [None, None, None]

    def url(self, i):
        return f"nats://127.0.0.1:{self.client_ports[i]}"

    def start(self, i):
        conf = os.path.join(self.root, f"n{i}.conf")
        routes = ", ".join(
            f'"nats-route://127.0.0.1:{p}"'
            for j, p in enumerate(self.route_ports)
            if j != i
        )
        with open(conf, "w") as f:
            f.write(
                f"server_name: gap-n{i}\n"
                f'cluster {{ name: gap, listen: "127.0.0.1:{self.route_ports[i]}", '
                f"routes: [{routes}] }}\n"
            )
        log = os.path.join(self.root, f"n{i}.log")
        if os.path.exists(log):
            os.remove(log)
        self.procs[i] = subprocess.Popen(
            ["nats-server", "-a", "127.0.0.1", "-p", str(self.client_ports[i]),
             "-js", "-sd", os.path.join(self.root, f"store{i}"), "-l", log, "-c", conf],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.path.exists(log) and "Server is ready" in open(log).read():
                return
            if self.procs[i].poll() is not None:
                sys.exit(f"nats-server n{i} exited; see {log}")
            time.sleep(0.005)
        sys.exit(f"nats-server n{i} not ready within 30 s")

    def kill(self, i):
        p = self.procs[i]
        if p is not None:
            p.kill()
            p.wait()
            self.procs[i] = None

    def stop_all(self):
        for i in range(3):
            self.kill(i)


async def leader(nc):
    try:
        m = await nc.request("$JS.API.STREAM.INFO.KV_w", b"", timeout=1)
        return json.loads(m.data).get("cluster", {}).get("leader")
    except Exception:
        return None


async def rounds(cluster, count):
    admin = await nats.connect([cluster.url(1), cluster.url(2)], max_reconnect_attempts=-1)
    js = admin.jetstream()
    while True:
        try:
            await js.add_stream(name="KV_w", subjects=["$KV.w.>"], allow_direct=True,
                                max_msgs_per_subject=1, num_replicas=3)
            break
        except Exception:
            await asyncio.sleep(0.2)
    listener = await nats.connect(cluster.url(2))
    heard = []

    async def on_put(m):
        heard.append(m.data)

    await listener.subscribe("$KV.w.h", cb=on_put)
    await listener.flush()
    missed = stale = 0
    for k in range(count):
        while await leader(admin) != "gap-n1":
            try:
                await admin.request("$JS.API.STREAM.LEADER.STEPDOWN.KV_w",
                                    b'{"placement":{"preferred":"gap-n1"}}', timeout=2)
            except Exception:
                pass
            await asyncio.sleep(0.3)
        cluster.kill(0)
        await asyncio.sleep(0.2)
        cluster.start(0)
        ready = time.time()
        while True:
            client = None
            try:
                client = await nats.connect(cluster.url(0), allow_reconnect=False, connect_timeout=1)
                await client.jetstream().stream_info("KV_w")
                break
            except Exception:
                if client is not None:
                    await client.close()
                await asyncio.sleep(0.002)
        heard.clear()
        body = f"v{k}".encode()
        while True:
            try:
                ack = await client.jetstream().publish("$KV.w.h", body, timeout=2)
                break
            except Exception:
                await asyncio.sleep(0.01)
        after_ms = (time.time() - ready) * 1000
        got = await listener.request("$JS.API.DIRECT.GET.KV_w.$KV.w.h", b"", timeout=2)
        fresh = got.data == body
        for _ in range(100):
            if body in heard:
                break
            await asyncio.sleep(0.01)
        rang = body in heard
        missed += not rang
        stale += not fresh
        print(f"round {k}: put stored at sequence {ack.seq}, {after_ms:.0f} ms after the "
              f"server was ready; doorbell {'heard' if rang else 'MISSED'}; first read "
              f"{'fresh' if fresh else 'stale'}", flush=True)
        await client.close()
    await listener.close()
    await admin.close()
    print(f"{missed} of {count} puts rang no doorbell; {stale} first reads were stale")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=25, help="server restarts (default 25)")
    ap.add_argument("--busy", type=int, default=0, help="spinning processes meanwhile (default 0)")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit(f"--rounds must be at least 1, not {args.rounds}")
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    with tempfile.TemporaryDirectory(prefix="route-gap-") as root:
        cluster = Cluster(root)
        try:
            for s in spinners:
                s.start()
            for i in range(3):
                cluster.start(i)
            asyncio.run(rounds(cluster, args.rounds))
        finally:
            for s in spinners:
                s.terminate()
            cluster.stop_all()


if __name__ == "__main__":
    main()
