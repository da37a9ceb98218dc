"""Device-run helper: the fp8_write benchmark, JSON + table into a folder.

usage: python scripts/gpu/fp8_write_bench.py OUT_DIR [cache dtypes, comma-separated] [cache GiB per buffer]
"""

import json
import os
import sys

from sglang_kv5d.bench import fp8_write as bench

out = sys.argv[1]
dtypes = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else bench.DEFAULT_CACHE_DTYPES
cache_gib = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
log = open(os.path.join(out, "fp8_write_bench.log"), "w")


def progress(line):
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


result = bench.run("cuda", progress=progress, cache_dtypes=dtypes, cache_gib=cache_gib)
with open(os.path.join(out, "fp8_write_bench.json"), "w") as f:
    json.dump(result, f, indent=1)
table = bench.format_table(result)
with open(os.path.join(out, "fp8_write_bench.txt"), "w") as f:
    f.write(table + "\n")
print(table)
