#!/usr/bin/env python3
"""Generate the quantization fixtures in tests/fixtures/quant/ (the oracle for the
generic kernels' dequantizers and the Q8_0 activation quantizer).

Oracle: the `gguf` Python package's reference (de)quantizers, gguf/quants.py.

Outputs (little-endian, no header; the test derives counts from the file size):
  <type>.blocks          raw blocks of <type>, then float32 gguf.quants.dequantize(raw)
                      for F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K
                      IQ4_NL IQ4_XS.
                      Quant bytes are random; fp16 scales are overwritten with finite
                      moderate values (d, m in [-2, 2], K-quant dmin in (0, 2]). Q2_K, Q3_K,
                      IQ4_NL and IQ4_XS (from their own generator, so the older files stay
                      byte-identical) also start with blocks whose scales are extreme
                      halves: +-65504, the smallest subnormal, -0.0; their packed 4/6-bit
                      sub-block scales, high-bit masks and IQ4 indices are random bytes, so
                      every bit of every field is exercised.
  q8_0_quantize.blocks   float32 input [n], then gguf.quants.quantize(input, Q8_0) bytes.
  q4_0_quantize.blocks   the same for Q4_0 (the q4_0 KV cache's encoder).
                      Includes an all-zero block and a block with exact rounding ties.

Deterministic (fixed seed). Run: python3 tools/make_quant_fixtures.py
Does not cover Q8_1/Q8_K (gguf-py has no quantizer for them).
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "quant")

# type -> (block elements, block bytes, n_blocks, {offset: kind}) where kind says how to
# fill the fp16 at that byte offset: "d" uniform [-2, 2], "dmin" uniform (0, 2].
QUANT = {
    T.Q4_0: (32, 18, 32, {0: "d"}),
    T.Q4_1: (32, 20, 32, {0: "d", 2: "d"}),
    T.Q5_0: (32, 22, 32, {0: "d"}),
    T.Q5_1: (32, 24, 32, {0: "d", 2: "d"}),
    T.Q8_0: (32, 34, 32, {0: "d"}),
    T.Q4_K: (256, 144, 8, {0: "d", 2: "dmin"}),
    T.Q5_K: (256, 176, 8, {0: "d", 2: "dmin"}),
    T.Q6_K: (256, 210, 8, {208: "d"}),
}

# The types added later, same format; written from a second generator.
QUANT_LOW = {
    T.Q2_K: (256, 84, 12, {80: "d", 82: "dmin"}),
    T.Q3_K: (256, 110, 12, {108: "d"}),
    T.IQ4_NL: (32, 18, 48, {0: "d"}),
    T.IQ4_XS: (256, 136, 12, {0: "d"}),
}
# Extreme fp16 scale values placed in the first blocks (d, then dmin where present).
EXTREME_D = [65504.0, -65504.0, 6.0e-8, -0.0]
EXTREME_DMIN = [6.0e-8, 65504.0, 0.0, 1.0]


def fp16_bytes(rng, kind, n):
    if kind == "d":
        v = rng.uniform(-2.0, 2.0, n)
    else:
        v = rng.uniform(1e-3, 2.0, n)
    return v.astype(np.float16).view(np.uint8).reshape(n, 2)


def write(name, raw, floats):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(raw).view(np.uint8).tobytes())
        f.write(np.ascontiguousarray(floats, dtype="<f4").tobytes())
    print(f"{name}: {os.path.getsize(path)} bytes")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240611)

    for qtype, (bs, ts, nb, fields) in QUANT.items():
        raw = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
        for off, kind in fields.items():
            raw[:, off:off + 2] = fp16_bytes(rng, kind, nb)
        out = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert out.size == nb * bs and np.all(np.isfinite(out)), qtype.name
        write(f"{qtype.name.lower()}.blocks", raw, out)

    rng_low = np.random.default_rng(20250301)
    for qtype, (bs, ts, nb, fields) in QUANT_LOW.items():
        raw = rng_low.integers(0, 256, size=(nb, ts), dtype=np.uint8)
        for off, kind in fields.items():
            raw[:, off:off + 2] = fp16_bytes(rng_low, kind, nb)
            extremes = EXTREME_D if kind == "d" else EXTREME_DMIN
            for b, v in enumerate(extremes):
                raw[b, off:off + 2] = np.array([v], dtype=np.float16).view(np.uint8)
        out = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert out.size == nb * bs and np.all(np.isfinite(out)), qtype.name
        write(f"{qtype.name.lower()}.blocks", raw, out)

    n = 512
    f32 = rng.standard_normal(n).astype(np.float32)
    write("f32.blocks", f32.view(np.uint8), quants.dequantize(f32.view(np.uint8), T.F32))
    f16 = (rng.standard_normal(n) * 4).astype(np.float16)
    f16[:4] = np.array([0.0, -0.0, 6.0e-8, -65504.0], dtype=np.float16)  # zero, subnormal, max
    write("f16.blocks", f16.view(np.uint8), quants.dequantize(f16.view(np.uint8), T.F16))
    bf = (rng.standard_normal(n) * 4).astype(np.float32).view(np.uint32) >> 16
    bf = bf.astype(np.uint16)
    write("bf16.blocks", bf.view(np.uint8), quants.dequantize(bf.view(np.uint8), T.BF16))

    # Q8_0 quantize: blocks of varying magnitude, an all-zero block, and a block whose
    # scale is exactly 1 so x*id lands on .5 ties (roundf rounds them away from zero).
    nb = 64
    x = (rng.standard_normal((nb, 32)) * rng.uniform(1e-3, 50.0, (nb, 1))).astype(np.float32)
    x[1] = 0.0
    x[2] = np.array([127.0] + [(k - 15) + 0.5 for k in range(31)], dtype=np.float32)
    x = x.reshape(-1)
    q = quants.quantize(x, T.Q8_0)
    path = os.path.join(OUT, "q8_0_quantize.blocks")
    with open(path, "wb") as f:
        f.write(x.astype("<f4").tobytes())
        f.write(np.ascontiguousarray(q).view(np.uint8).tobytes())
    print(f"q8_0_quantize.blocks: {os.path.getsize(path)} bytes")

    # Q4_0 quantize (the q4_0 KV cache): the same kinds of blocks; x/d lands on the
    # truncation edge (q + 0.5 exactly) in block 2.
    x = (rng.standard_normal((nb, 32)) * rng.uniform(1e-3, 50.0, (nb, 1))).astype(np.float32)
    x[1] = 0.0
    x[2] = np.array([-8.0] + [(k % 16) - 7.5 for k in range(31)], dtype=np.float32)
    x = x.reshape(-1)
    q = quants.quantize(x, T.Q4_0)
    path = os.path.join(OUT, "q4_0_quantize.blocks")
    with open(path, "wb") as f:
        f.write(x.astype("<f4").tobytes())
        f.write(np.ascontiguousarray(q).view(np.uint8).tobytes())
    print(f"q4_0_quantize.blocks: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
