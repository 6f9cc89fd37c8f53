#!/usr/bin/python3
"""Reads shards `ringtape pack` wrote the way the `webdataset` package does, with Python's tarfile.

  /usr/bin/python3 bench/check_shards_python.py SHARD.tar [SHARD.tar ...]

Members are grouped into samples by webdataset's key rule (tariterators.base_plus_ext: the
path up to the first '.' of the file name is the key, the rest the field; consecutive members
with one key are one sample). For every sample: a jpg field that PIL opens, a cls field that
int() parses, a json field naming the packed file's path and label (Note [Pack keys]); and
against ringtape's index (SHARD.idx, version 1 or 2): the same keys in the same order, the
jpg member's data offset and size, the label. Prints the counts; exits 1 on any mismatch.
(The webdataset package is not in Debian; this applies its rule directly.)
"""

import io
import json
import re
import sys
import tarfile

from PIL import Image

KEY_RULE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def samples(path):
    current, sample = None, {}
    with tarfile.open(path) as tar:
        for m in tar:
            if not m.isfile():
                continue
            match = KEY_RULE.match(m.name)
            if not match:
                continue
            key, field = match.groups()
            if key != current and sample:
                yield current, sample
                sample = {}
            current = key
            sample[field] = (m.offset_data, m.size, tar.extractfile(m).read())
    if sample:
        yield current, sample


def main():
    bad = 0
    total = 0
    for path in sys.argv[1:]:
        index = open(path[: -len(".tar")] + ".idx").read().split("\n")
        count = int(index[4].split()[1])  # "samples <n>"; version 2 goes on with classes and inputs
        rows = [line.split() for line in index[5:5 + count]]
        got = list(samples(path))
        if len(got) != len(rows):
            print(f"{path}: {len(got)} samples by tarfile, {len(rows)} in the index")
            bad += 1
        for (key, fields), row in zip(got, rows):
            offset, size, data = fields["jpg"]
            Image.open(io.BytesIO(data)).load()
            label = int(fields["cls"][2])
            if "json" in fields:
                meta = json.loads(fields["json"][2])
                if meta.get("label") != label or not meta.get("path"):
                    print(f"{path}: sample {key}: its json member {meta} does not match label {label}")
                    bad += 1
            if [key, "jpg", str(offset), str(size), str(label)] != row:
                print(f"{path}: sample {key}: tarfile {offset} {size} {label}, index {row}")
                bad += 1
        total += len(got)
    print(f"{total} samples in {len(sys.argv) - 1} shard(s) read with tarfile and webdataset's key rule; "
          f"{bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
