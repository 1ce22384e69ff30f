#!/usr/bin/env python3
"""Prints unleash-variants.json: the variant an Unleash SDK picks for a flag
whose variants were defined in Unleash with the percentages of a graygate ab
rule, with nothing but Python's standard library.

Unleash stores variant weights on a 0..1000 scale (unleash-server's
variantSchema: "an integer between 0 and 1000"; weights of type "variable"
are spread so that they add up to 1000), so a 50%/50% split is 500/500. The
SDKs pick a variant with selectVariantDefinition, normalizing the variant
hash by the total of the weights:

    total  = sum of the weights
    target = murmur3_x86_32(groupId + ":" + stickinessValue, 86028157) % total + 1
    walk the variants, skipping weight 0, adding each weight to a counter,
    and take the first at which counter >= target

murmur3_x86_32 is Austin Appleby's MurmurHash3_x86_32 (smhasher,
src/MurmurHash3.cpp, public domain), over the UTF-8 bytes of the string as
the Go, Java and Python SDKs hash. It is written out below and checked
against the normalized values Unleash's own SDK tests assert (73, 25, 96
and 60) and against MurmurHash3's published verification value.

Run: python3 unleash-variants.py > unleash-variants.json
"""
import json
import struct

VARIANT_SEED = 86028157


def rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def fmix32(h):
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def murmur3_x86_32(data, seed=0):
    """MurmurHash3_x86_32 of bytes data."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & 0xFFFFFFFF
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        (k,) = struct.unpack_from("<I", data, 4 * i)
        k = (k * c1) & 0xFFFFFFFF
        k = rotl32(k, 15)
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = rotl32(h, 13)
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = data[4 * nblocks:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * c1) & 0xFFFFFFFF
        k = rotl32(k, 15)
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= n
    return fmix32(h)


def normalized(uid, group_id, normalizer, seed):
    """Unleash's normalizedValue."""
    return murmur3_x86_32((group_id + ":" + uid).encode("utf-8"), seed) % normalizer + 1


def select_variant(target, weights):
    """Unleash's selectVariantDefinition walk; -1 if no variant is reached."""
    counter = 0
    for i, w in enumerate(weights):
        if w == 0:
            continue
        counter += w
        if counter >= target:
            return i
    return -1


def verification():
    """SMHasher's VerificationTest for MurmurHash3_x86_32: hash keys
    {0}, {0,1}, ..., {0..254} with seed 256-i, hash the concatenated
    little-endian results with seed 0, and take the first 4 bytes."""
    out = b""
    for i in range(256):
        key = bytes(range(i))
        out += struct.pack("<I", murmur3_x86_32(key, 256 - i))
    return murmur3_x86_32(out, 0)


def check():
    assert verification() == 0xB0F57EE3, hex(verification())
    # unleash-client-node src/test/strategy/util.test.ts and
    # unleash-client-go internal/strategies/helpers_test.go
    assert normalized("123", "gr1", 100, 0) == 73
    assert normalized("999", "groupX", 100, 0) == 25
    assert normalized("123", "gr1", 100, VARIANT_SEED) == 96
    assert normalized("999", "groupX", 100, VARIANT_SEED) == 60


SPLITS = [
    ["control", "treatment"], [50, 50],
    ["A", "B"], [10, 90],
    ["A", "B"], [1, 99],
    ["A", "B", "C"], [34, 33, 33],
    ["A", "B", "C"], [1, 49, 50],
    ["blue", "red", "green", "yellow"], [25, 25, 25, 25],
    ["A", "B", "C"], [0, 50, 50],
    ["A", "B", "C", "D", "E"], [7, 13, 17, 19, 44],
    # Weights Unleash stores that are not whole percentages: its
    # fixVariantWeights spreads variable weights over 1000 and gives the
    # remainder to the first variants, so an even three-way split is
    # 334/333/333 and an even seven-way one 143 x 6 and 142.
    ["A", "B", "C"], [33.4, 33.3, 33.3],
    ["A", "B", "C", "D", "E", "F", "G"], [14.3, 14.3, 14.3, 14.3, 14.3, 14.3, 14.2],
    ["A", "B"], [12.5, 87.5],
    ["A", "B"], [0.1, 99.9],
]
GROUP_IDS = ["checkout-feature", "Feature.Variants.A", "实验-ü"]
IDS = [str(1000 + i) for i in range(40)] + ["user-42", "用户42", "naïve", "😀"]


def main():
    check()
    cases = []
    for i in range(0, len(SPLITS), 2):
        names, percents = SPLITS[i], SPLITS[i + 1]
        weights = [round(10 * p) for p in percents]  # as Unleash stores the percentages
        total = sum(weights)
        for gid in GROUP_IDS:
            for uid in IDS:
                target = normalized(uid, gid, total, VARIANT_SEED)
                v = select_variant(target, weights)
                cases.append({"group_id": gid, "id": uid, "percents": percents, "unleash_weights": weights,
                              "names": names, "target": target, "expected": names[v]})
    doc = {
        "source": "unleash-variants.py: Unleash's selectVariantDefinition over weights as the Unleash server stores the "
                  "percentages (x10, a total of 1000), murmur3_x86_32 written out from MurmurHash3.cpp over UTF-8 bytes",
        "variants": cases,
    }
    parts = []
    for k, v in doc.items():
        if isinstance(v, list):
            rows = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in v)
            parts.append(json.dumps(k) + ": [\n" + rows + "\n]")
        else:
            parts.append(json.dumps(k) + ": " + json.dumps(v, ensure_ascii=False))
    print("{\n" + ",\n".join(parts) + "\n}")


if __name__ == "__main__":
    main()
