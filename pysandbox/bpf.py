"""A small, audited classic-BPF builder: the instruction encoding, a program with
forward jumps to named labels, and the shape check and disassembly the tests and
audits use. pysandbox's seccomp filters (:mod:`pysandbox.seccomp`) are written with it.

Why a builder and not libseccomp: the filters pysandbox needs are two short
programs (under a hundred instructions) whose every instruction is written out in
seccomp.py and checked by tests. libseccomp would add a C library dependency to both
backends (the native executor only loads finished programs; bwrap only reads them
from a descriptor), and its generated programs are harder to audit for the details
that matter here: the arch check (x32, i386) and the 32-bit masked compare of the
ioctl request and of the socket family. Caller-supplied classic BPF (for instance
produced by libseccomp's ``seccomp_export_bpf``) passes through unchanged.
"""

from __future__ import annotations

import struct

from .errors import PolicyError, Reason

# <linux/filter.h>, <linux/bpf_common.h>
BPF_LD_W_ABS = 0x20     # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k]
BPF_JEQ_K = 0x15        # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35        # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x45       # BPF_JMP | BPF_JSET | BPF_K: jump if A & k
BPF_JA = 0x05           # BPF_JMP | BPF_JA
BPF_RET_K = 0x06        # BPF_RET | BPF_K
MAX_INSNS = 4096        # BPF_MAXINSNS


def insn(code: int, jt: int, jf: int, k: int) -> bytes:
    """One instruction, as the kernel's ``struct sock_filter``."""
    return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)


class Program:
    """A classic BPF program with forward jumps to named labels.

    ``jeq(k, true, false)``: the branches are labels or None (the next instruction).
    ``assemble()`` resolves labels and refuses backward or too-long jumps.

    Raises:
        ValueError: (``label``, ``assemble``) a label defined twice, an undefined
            label, a backward jump or one longer than 255 instructions.
        PolicyError: (``assemble``) the assembled program fails :func:`validate`.
    """

    def __init__(self):
        self._insns: list = []     # (code, jt, jf, k)
        self._labels: dict = {}

    def label(self, name: str) -> "Program":
        if name in self._labels:
            raise ValueError(f"label {name!r} defined twice")
        self._labels[name] = len(self._insns)
        return self

    def load(self, offset: int) -> "Program":
        self._insns.append((BPF_LD_W_ABS, None, None, offset))
        return self

    def jeq(self, k: int, true=None, false=None) -> "Program":
        self._insns.append((BPF_JEQ_K, true, false, k))
        return self

    def jge(self, k: int, true=None, false=None) -> "Program":
        self._insns.append((BPF_JGE_K, true, false, k))
        return self

    def jset(self, k: int, true=None, false=None) -> "Program":
        self._insns.append((BPF_JSET_K, true, false, k))
        return self

    def ja(self, target) -> "Program":
        self._insns.append((BPF_JA, target, None, 0))
        return self

    def ret(self, k: int) -> "Program":
        self._insns.append((BPF_RET_K, None, None, k))
        return self

    def assemble(self) -> bytes:
        out = []
        for pc, (code, jt, jf, k) in enumerate(self._insns):
            if code in (BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K):
                jt, jf = self._offset(pc, jt), self._offset(pc, jf)
            elif code == BPF_JA:
                k, jt, jf = self._offset(pc, jt, limit=2**31 - 1), 0, 0
            else:
                jt = jf = 0
            out.append(insn(code, jt, jf, k))
        program = b"".join(out)
        validate(program)
        return program

    def _offset(self, pc: int, target, limit: int = 255) -> int:
        if target is None:
            return 0
        if target not in self._labels:
            raise ValueError(f"undefined label {target!r}")
        delta = self._labels[target] - pc - 1
        if not 0 <= delta <= limit:
            raise ValueError(f"jump from {pc} to {target!r} is backward or longer than {limit}")
        return delta


def validate(program: bytes) -> bytes:
    """Check the shape of a classic BPF program: whole instructions, at most 4096, every
    jump forward and inside the program, ending in a return. The kernel checks the
    rest (opcodes, seccomp_data bounds) when it is loaded.

    Raises:
        PolicyError: ``invalid_value`` for a malformed program.
    """
    if not isinstance(program, (bytes, bytearray)) or not program or len(program) % 8:
        raise PolicyError("a seccomp program is classic BPF: a non-empty multiple of 8 bytes",
                          Reason.INVALID_VALUE, program)
    count = len(program) // 8
    if count > MAX_INSNS:
        raise PolicyError(f"a seccomp program has at most {MAX_INSNS} instructions",
                          Reason.INVALID_VALUE, count)
    for pc in range(count):
        code, jt, jf, k = struct.unpack_from("<HBBI", program, pc * 8)
        if code & 0x07 == 0x05:   # BPF_JMP
            targets = (pc + 1 + k,) if code == BPF_JA else (pc + 1 + jt, pc + 1 + jf)
            if any(t >= count for t in targets):
                raise PolicyError(f"seccomp instruction {pc} jumps outside the program",
                                  Reason.INVALID_VALUE, pc)
    last = struct.unpack_from("<H", program, (count - 1) * 8)[0]
    if last & 0x07 != 0x06:       # BPF_RET
        raise PolicyError("a seccomp program must end with a return", Reason.INVALID_VALUE, last)
    return bytes(program)


def disassemble(program: bytes) -> list[tuple[int, int, int, int]]:
    """The instructions as (code, jt, jf, k) tuples, for tests and audits."""
    return [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
