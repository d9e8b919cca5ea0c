#!/usr/bin/env python3
"""Read one KV entry with nats-py, a NATS client this project did not write.

Usage: kv_get.py [--nkey SEED_FILE] [--inbox-prefix PREFIX] NATS_URL BUCKET KEY

Prints a JSON object {"revision": N, "value": "<text>"} or exits 3 when the
key has no value. Against a server that takes only nkeys (scripts/swarm-up,
production), pass an identity's seed file and the reply inbox its
permissions allow (the controller's is `_INBOX_swarm-controller`).
"""
import argparse
import asyncio
import json
import sys

import nats
from nats.js.errors import KeyNotFoundError


async def main(args):
    options = {"connect_timeout": 5, "max_reconnect_attempts": 0}
    if args.nkey:
        options["nkeys_seed"] = args.nkey
    if args.inbox_prefix:
        options["inbox_prefix"] = args.inbox_prefix
    nc = await nats.connect(args.url, **options)
    try:
        kv = await nc.jetstream().key_value(args.bucket)
        try:
            entry = await kv.get(args.key)
        except KeyNotFoundError:
            return 3
        print(json.dumps({
            "revision": entry.revision,
            "value": entry.value.decode("utf-8"),
        }))
        return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Read one KV entry with nats-py.")
    parser.add_argument("--nkey", help="an nkey seed file to connect with")
    parser.add_argument("--inbox-prefix", help="the reply inbox the identity may use")
    parser.add_argument("url")
    parser.add_argument("bucket")
    parser.add_argument("key")
    sys.exit(asyncio.run(main(parser.parse_args())))
