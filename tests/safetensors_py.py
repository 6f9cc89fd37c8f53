"""The safetensors format for the golden-value generators (tests/*/gen_golden.py), which run
under Debian's python3-torch without the safetensors package.

Layout: u64 little-endian header length, a JSON header padded with spaces to a multiple of 8
(keys sorted, "__metadata__" first), then the tensors' little-endian bytes in key order.
"""
import json
import struct

import torch

ST_DTYPES = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
             torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8"}
TORCH_DTYPES = {v: k for k, v in ST_DTYPES.items()}


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        # numpy has no bfloat16: its bytes go through int16.
        data = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": [int(d) for d in t.shape],
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Returns ({name: tensor}, metadata): the generators read their files back as a check."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dtype = TORCH_DTYPES[e["dtype"]]
        buf = bytearray(raw[8 + n + b:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(e["shape"]) if buf else \
            torch.empty(e["shape"], dtype=dtype)
    return out, meta
