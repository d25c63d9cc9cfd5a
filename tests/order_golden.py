#!/usr/bin/env python3
"""Independent transcription of the EpochPermutation algorithm documented in
libshard/src/loader/order.h; prints the golden values used by tests/order_test.cc."""
M = (1 << 64) - 1
def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def perm(n, seed, epoch):
    st = [mix((mix(seed) + epoch) & M)]
    def nxt():
        st[0] = (st[0] + 0x9E3779B97F4A7C15) & M
        return mix(st[0])
    def below(m):
        w = nxt() * m; lo = w & M
        if lo < m:
            t = ((1 << 64) - m) % m
            while lo < t:
                w = nxt() * m; lo = w & M
        return w >> 64
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(i + 1); p[i], p[j] = p[j], p[i]
    return p
for name, args, k in [("GOLDEN_10_0_0", (10, 0, 0), 10), ("GOLDEN_10_42_0", (10, 42, 0), 10), ("GOLDEN_10_42_1", (10, 42, 1), 10), ("GOLDEN_1000_7_3", (1000, 7, 3), 8)]:
    print(name, ", ".join(map(str, perm(*args)[:k])))
