#!/usr/bin/env python3
"""Derives `regulation_ids.txt` from PrivaCI-Bench's GDPR and HIPAA clause knowledge
bases. Run once, by hand, when vendoring (from the repository root):

    python3 data/privacy/privaci-bench-kbs/derive.py SRC_DIR \
        > data/privacy/privaci-bench-kbs/regulation_ids.txt

SRC_DIR holds `GDPR.jsonl` and `HIPAA.jsonl` (one clause a line). The output has one
distinct `regulation_id` a line, prefixed by its regulation (`HIPAA 164.502(a)(1)(i)`,
`GDPR Article 6(1)`, `GDPR Recital 12`), sorted by code point. Values are JSON-encoded
strings in the knowledge bases, except the GDPR articles' ids, which are stored raw: a
value that decodes to a string is decoded, any other is kept as it is.
"""
import json
import sys

REGULATIONS = ["GDPR", "HIPAA"]


def decode(value):
    try:
        decoded = json.loads(value)
    except ValueError:
        return value
    return decoded if isinstance(decoded, str) else value


def main(src):
    ids = set()
    for reg in REGULATIONS:
        with open(f"{src}/{reg}.jsonl", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    rid = decode(json.loads(line)["regulation_id"]).strip()
                    ids.add(f"{reg} {rid}")
    sys.stdout.write("".join(f"{i}\n" for i in sorted(ids)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: derive.py SRC_DIR > regulation_ids.txt")
    main(sys.argv[1])
