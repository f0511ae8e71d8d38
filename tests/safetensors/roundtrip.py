"""Python's side of test_safetensors_python: python roundtrip.py QKV_FILE PYTHON_FILE

Loads QKV_FILE (written by python_roundtrip.cpp) with safetensors.numpy, checks every tensor's
dtype, shape and bits against values recomputed here from the same formulas, checks the layout
the format prescribes by reading the raw bytes, then writes PYTHON_FILE from numpy arrays for the
C++ side to check. bf16 goes through ml_dtypes.bfloat16, which safetensors.numpy maps to BF16;
the expected bf16 bits are computed here by exact rounding in Python, not by ml_dtypes.
"""

import json
import math
import struct
import sys

import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def bf16_bits(x):
    """The bits of float x rounded to bfloat16 (8 significant bits), ties to even."""
    if x == 0.0 or math.isinf(x):
        return struct.unpack("<I", struct.pack("<f", x))[0] >> 16
    mantissa, exponent = math.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    rounded = round(mantissa * 256) / 256  # round() on floats is exact, ties to even
    return struct.unpack("<I", struct.pack("<f", math.ldexp(rounded, exponent)))[0] >> 16


# The tensors python_roundtrip.cpp writes, as (dtype, shape, value of row-major element k).
EXPECTED_FROM_QKV = {
    "f64": (np.float64, (2, 3, 4), lambda k: (k - 11) / 7.0),
    "f32_strided": (np.float32, (3, 5), lambda k: k / 3.0 - 2.0),
    "bf16": (ml_dtypes.bfloat16, (4, 4), lambda k: (k - 8) * 1.01),
    "f16": (np.float16, (6,), lambda k: (k - 2.5) / 3.0),
    "f16_special": (np.float16, (5,), lambda k: [-0.0, math.inf, -math.inf, 65504.0, 2.0**-24][k]),
    "mask": (np.bool_, (7,), lambda k: k % 3 == 0),
    "scalar": (np.float64, (), lambda k: math.pi),
    "empty": (np.float32, (2, 0, 3), lambda k: 0.0),
}
METADATA_FROM_QKV = {"written_by": "qkv", "note": "\u00e9t\u00e9"}


def expected_bits(dtype, values):
    """The little-endian bytes of values rounded to dtype, rounded independently of ml_dtypes."""
    if dtype is ml_dtypes.bfloat16:
        return np.array([bf16_bits(v) for v in values], dtype="<u2").tobytes()
    # numpy converts float64 to float32 and float16 directly, rounding to nearest even.
    return np.array(values, dtype=np.float64).astype(dtype).tobytes()


def check_layout(path):
    """The format's rules on the raw bytes: padded header, data in order without gaps."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    check(length % 8 == 0, f"header length {length} is not a multiple of 8")
    text = raw[8 : 8 + length].decode("utf-8")
    json_text = text.rstrip(" ")
    check(json_text.endswith("}") and len(text) - len(json_text) < 8, "padding is not spaces")
    header = json.loads(text)
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    cursor = 0
    for begin, end in spans:
        check(begin == cursor, f"data_offsets [{begin}, {end}] do not start at {cursor}")
        cursor = end
    check(cursor == len(raw) - 8 - length, "bytes after the last tensor")


def check_qkv_file(path):
    check_layout(path)
    tensors = load_file(path)
    check(set(tensors) == set(EXPECTED_FROM_QKV), f"names {sorted(tensors)}")
    for name, (dtype, shape, value) in EXPECTED_FROM_QKV.items():
        if name not in tensors:
            continue
        array = tensors[name]
        check(array.dtype == np.dtype(dtype), f"{name}: dtype {array.dtype}, expected {dtype}")
        check(array.shape == shape, f"{name}: shape {array.shape}, expected {shape}")
        values = [value(k) for k in range(math.prod(shape))]
        got = np.ascontiguousarray(array).tobytes()
        want = expected_bits(dtype, values)
        check(got == want, f"{name}: bytes {got.hex()}, expected {want.hex()}")
    with safe_open(path, framework="numpy") as f:
        check(f.metadata() == METADATA_FROM_QKV, f"metadata {f.metadata()}")


def write_python_file(path):
    """The values python_roundtrip.cpp expects, made by numpy."""
    k = np.arange(24)
    tensors = {
        "p_f64": (k[:6] / 7.0 - 0.3).reshape(3, 2),
        "p_f32": (k.astype(np.float32) / np.float32(3)).reshape(2, 3, 4),
        "p_bf16": ((k[:10].astype(np.float32) - 3) * np.float32(0.3)).astype(ml_dtypes.bfloat16),
        "p_f16": (k[:8].astype(np.float16) / np.float16(4) - np.float16(1.25)),
        "p_bool": (k[:8] % 2 == 1).reshape(2, 2, 2),
        "p_scalar": np.array(2.5, dtype=np.float32),
        "p_empty": np.zeros((0, 4), dtype=np.float64),
    }
    save_file(tensors, path, metadata={"written_by": "python"})


def main():
    qkv_file, python_file = sys.argv[1], sys.argv[2]
    check_qkv_file(qkv_file)
    write_python_file(python_file)
    for failure in failures:
        print("roundtrip.py:", failure)
    print(f"roundtrip.py: checked {qkv_file}, {len(failures)} failures; wrote {python_file}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
