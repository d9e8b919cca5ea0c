#!/usr/bin/env python3
"""Read one KV entry with nats-py, a NATS client this project did not write.

Usage: kv_get.py NATS_URL BUCKET KEY
Prints a JSON object {"revision": N, "created": "<iso>", "value": "<text>"} or
exits 3 when the key has no value.
"""
import asyncio
import json
import sys

import nats
from nats.js.errors import KeyNotFoundError


async def main(url, bucket, key):
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        kv = await nc.jetstream().key_value(bucket)
        try:
            entry = await kv.get(key)
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
    sys.exit(asyncio.run(main(*sys.argv[1:4])))
