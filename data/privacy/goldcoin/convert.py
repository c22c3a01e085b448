#!/usr/bin/env python3
"""Converts GoldCoin's HIPAA case splits (CSV, `generate_characteristics` a Python
literal) into the JSON Lines Knox reads. Run once, by hand, when vendoring:

    python3 convert.py SRC_DIR   # SRC_DIR holds {train,val}_generate_cases_hipaa_applicability.csv

Each output line keeps, row by row and unchanged: the label (`generate_HIPAA_type`), the
structured characteristics (parsed with `ast.literal_eval`, values as given), the
provisions the case was generated from and the source ids, and the prose background
(`generate_background`) as `background`: the structured mapping to φ never reads it;
`knox eval --guard regulation-cases --from-text` gives it to a judge, which fills φ's
fields from the prose alone. A row whose
characteristics do not parse is kept with `characteristics: null` (counted unmappable).
The compliance splits are the Permit / Forbid rows of the applicability splits (checked
row for row when this was vendored), so only the applicability splits are converted.
"""
import ast
import csv
import json
import sys

SPLITS = ["train", "val"]


def main(src):
    for split in SPLITS:
        name = f"{split}_generate_cases_hipaa_applicability"
        with open(f"{src}/{name}.csv", newline="") as f, open(f"{name}.jsonl", "w") as out:
            for i, row in enumerate(csv.DictReader(f)):
                try:
                    ch = ast.literal_eval(row["generate_characteristics"])
                    if not isinstance(ch, dict):
                        ch = None
                except (ValueError, SyntaxError):
                    ch = None
                if ch is not None:
                    ch = {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in ch.items()}
                rec = {
                    "row": i,
                    "label": row["generate_HIPAA_type"],
                    "characteristics": ch,
                    "regulation_ids": row["generate_regulation_ids"],
                    "refer_id": row["refer_id"],
                    "background": row["generate_background"],
                }
                out.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
