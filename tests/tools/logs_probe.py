#!/usr/bin/env python3
"""Ask a hive for an agent's logs with nats-py, a NATS client this project
did not write, speaking the protocol of docs/protocol.md ("Logs").

Usage: logs_probe.py --nkey SEED_FILE --inbox-prefix PREFIX [--wait S]
                     NATS_URL HIVE AGENT

As the identity of SEED_FILE: subscribe to a reply subject under HIVE's
answer prefix, publish a logs request for AGENT (tail 100) with that reply,
acknowledge every frame, and stop at the frame with "end" or after S
seconds (default 5). Prints one JSON object:
{"frames": N, "lines": ["…"], "end": bool, "error": "…" or null,
 "refusals": ["…"]}, where refusals are what the server told this client
(permissions violations).
"""
import argparse
import asyncio
import json
import secrets
import sys

import nats


async def main(args):
    refusals = []

    async def on_error(e):
        refusals.append(str(e))

    nc = await nats.connect(
        args.url,
        nkeys_seed=args.nkey,
        inbox_prefix=args.inbox_prefix,
        connect_timeout=5,
        max_reconnect_attempts=0,
        error_cb=on_error,
    )
    token = secrets.token_hex(8)
    prefix = f"hyperhive.hive.{args.hive}"
    reply = f"{prefix}.answer.{token}"
    out = {"frames": 0, "lines": [], "end": False, "error": None}
    done = asyncio.Event()

    async def on_frame(msg):
        try:
            frame = json.loads(msg.data)
        except ValueError:
            return
        out["frames"] += 1
        out["lines"].extend(l.get("line", "") for l in frame.get("lines", []))
        if frame.get("end"):
            out["end"] = True
            out["error"] = frame.get("error")
            done.set()
            return
        ack = json.dumps({"seq": frame["seq"]}).encode()
        await nc.publish(f"{prefix}.logs.ack.{token}", ack)

    try:
        await nc.subscribe(reply, cb=on_frame)
        request = {"schema": 1, "agent": args.agent, "tail": 100}
        await nc.publish(
            f"{prefix}.logs.request", json.dumps(request).encode(), reply=reply
        )
        await nc.flush()
        try:
            await asyncio.wait_for(done.wait(), args.wait)
        except asyncio.TimeoutError:
            pass
    finally:
        out["refusals"] = refusals
        await nc.close()
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--nkey", required=True)
    p.add_argument("--inbox-prefix", required=True)
    p.add_argument("--wait", type=float, default=5.0)
    p.add_argument("url")
    p.add_argument("hive")
    p.add_argument("agent")
    asyncio.run(main(p.parse_args()))
