"""Reading what nvcc compiled into a cubin: kernel parameter layouts and build-info constants.

A cubin is an ELF file. For each kernel `k`, the section `.nv.info.k` holds a list of attributes
(EIATTR_*), each `u8 format, u8 attribute` followed by its value: NVAL, BVAL and HVAL take two
bytes (BVAL uses the first), SVAL a u16 length and that many bytes. The records read here:
  EIATTR_KPARAM_INFO (SVAL, 12 bytes): u32 index, u16 ordinal, u16 offset, u32 flags whose bits
    18..31 are the parameter's size in bytes
  EIATTR_CBANK_PARAM_SIZE (HVAL): total parameter bytes
  EIATTR_MAX_THREADS (SVAL, 3 x u32): the block shape of __launch_bounds__, when given
Build-info constants (`__constant__ int alpha_rl_*`, see cuda/common.cuh) are read from the symbol
table and the constant section the symbol points into.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alpha_rl.errors import ContractError
from alpha_rl.kernels.decl import ParamSlot

EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_MAX_THREADS = 0x05
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
_INFO_PREFIX = ".nv.info."


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel as nvcc compiled it."""

    name: str
    params: tuple[ParamSlot, ...]  # by ordinal
    param_bytes: int | None
    max_threads: tuple[int, int, int] | None


@contextmanager
def _elffile(path: Path) -> Iterator:
    """The cubin as a pyelftools ELFFile, its file closed afterwards."""
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError as exc:  # pragma: no cover - dev extra missing
        raise ContractError("reading cubins needs pyelftools: pip install -e '.[dev]'") from exc
    with path.open("rb") as stream:
        yield ELFFile(stream)


def _attributes(data: bytes, where: str):
    """Yield (attribute, value bytes) from one .nv.info section."""
    pos = 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise ContractError(f"{where}: truncated attribute at byte {pos}")
        fmt, attr = data[pos], data[pos + 1]
        pos += 2
        if fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            size = 2
        elif fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", data, pos)
            pos += 2
        else:
            raise ContractError(f"{where}: unknown attribute format {fmt:#x} at byte {pos - 2}")
        yield attr, data[pos : pos + size]
        pos += size


def _kernel(name: str, data: bytes, where: str) -> CompiledKernel:
    params, total, max_threads = {}, None, None
    for attr, value in _attributes(data, where):
        if attr == EIATTR_KPARAM_INFO:
            _index, ordinal, offset, flags = struct.unpack("<IHHI", value)
            params[ordinal] = ParamSlot(ordinal, offset, (flags >> 18) & 0x3FFF)
        elif attr == EIATTR_CBANK_PARAM_SIZE:
            (total,) = struct.unpack("<H", value)
        elif attr == EIATTR_MAX_THREADS:
            max_threads = struct.unpack("<III", value)
    if sorted(params) != list(range(len(params))):
        raise ContractError(f"{where}: parameter ordinals {sorted(params)} are not 0..n-1")
    return CompiledKernel(name, tuple(params[i] for i in sorted(params)), total, max_threads)


def compiled_kernels(cubin: Path) -> dict[str, CompiledKernel]:
    """Kernel name -> its compiled parameter layout, for every kernel in the cubin."""
    kernels = {}
    with _elffile(cubin) as elf:
        for section in elf.iter_sections():
            if section.name.startswith(_INFO_PREFIX):
                name = section.name[len(_INFO_PREFIX) :]
                kernels[name] = _kernel(name, section.data(), f"{cubin}:{section.name}")
        for section in elf.iter_sections():  # kernels without parameters have no KPARAM records
            if section.name.startswith(".text."):
                kernels.setdefault(section.name[6:], CompiledKernel(section.name[6:], (), 0, None))
    return kernels


def constants_i32(cubin: Path, prefix: str) -> dict[str, int]:
    """Every 4-byte `__constant__` symbol named `prefix<NAME>`: {NAME: initial value}."""
    out = {}
    with _elffile(cubin) as elf:
        symtab = elf.get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab is not None else ():
            if sym.name.startswith(prefix) and sym["st_size"] == 4:
                data = elf.get_section(sym["st_shndx"]).data()
                out[sym.name[len(prefix) :]] = struct.unpack_from("<i", data, sym["st_value"])[0]
    return out


def constant_i32(cubin: Path, symbol: str) -> int | None:
    """Initial value of a 4-byte `__constant__` symbol, or None when the cubin lacks it."""
    with _elffile(cubin) as elf:
        symtab = elf.get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab is not None else ():
            if sym.name == symbol and sym["st_size"] == 4:
                data = elf.get_section(sym["st_shndx"]).data()
                return struct.unpack_from("<i", data, sym["st_value"])[0]
    return None
