#!/usr/bin/env python3
"""tools/write_safetensors_sample.py — a safetensors file written by the reference
`safetensors` package (numpy API), and a JSON manifest of what it holds, for the
cross-check in tests/formats/safetensors_test.cpp.

Usage: python3 tools/write_safetensors_sample.py OUT_PREFIX
  writes OUT_PREFIX.safetensors (safetensors.numpy.save_file, with __metadata__) and
  OUT_PREFIX.json: {"metadata": {...}, "tensors": {name: {"dtype": "F32", "shape": [...],
  "hex": bytes as numpy's tobytes() in little-endian C order}}}.
Exits 77 when numpy or safetensors is missing (scripts/test installs safetensors==0.4.5).
Every numpy dtype the package accepts is covered (numpy has no BF16 or FP8), plus a
scalar, empty tensors and an odd-length F16 tensor that leaves the next one misaligned.
"""
import json
import sys

try:
    import numpy as np
    from safetensors.numpy import save_file
except ImportError:
    sys.exit(77)

# numpy dtype -> the format's dtype name.
DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}


def main():
    prefix = sys.argv[1]
    rng = np.random.default_rng(7)
    tensors = {}
    shapes = [(3, 5), (7,), (2, 3, 4), (1, 1, 9), (4, 2), (5,), (3, 3), (2, 2, 2), (11,), (6, 1), (13,), (2, 5)]
    for (name, _), shape in zip(DTYPES.items(), shapes):
        if name == "bool":
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif name.startswith("float"):
            a = rng.standard_normal(shape).astype(name)
        else:
            info = np.iinfo(name)
            a = rng.integers(info.min, info.max, size=shape, dtype=name, endpoint=True)
        tensors["t." + name] = a
    tensors["odd.f16"] = rng.standard_normal((3,)).astype(np.float16)  # 6 bytes
    tensors["scalar.f32"] = np.array(2.5, dtype=np.float32)
    tensors["empty.f32"] = np.zeros((0, 4), dtype=np.float32)
    tensors["empty.u32"] = np.zeros((3, 0), dtype=np.uint32)
    metadata = {"format": "np", "note": "caf\u00e9 \u2581"}
    save_file(tensors, prefix + ".safetensors", metadata=metadata)
    manifest = {"metadata": metadata, "tensors": {}}
    for name, a in tensors.items():
        manifest["tensors"][name] = {
            "dtype": DTYPES[a.dtype.name],
            "shape": list(a.shape),
            "hex": np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes().hex(),
        }
    with open(prefix + ".json", "w", encoding="utf-8") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
