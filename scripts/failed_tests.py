#!/usr/bin/env python3
"""Prints the name of every test that did not pass in a meson testlog.json."""
import json
import sys

BAD = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS"}
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if not line:
            continue
        entry = json.loads(line)
        if entry.get("result") in BAD:
            # "project / test" in the log; meson test takes the bare name
            print(entry["name"].split(" / ", 1)[-1])
