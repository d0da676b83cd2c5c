"""Checks that the package's extension libraries keep their code to themselves.

    python scripts/check_symbols.py                  # the built op_extension/_C, _cuda_sim, _ascend_sim
    python scripts/check_symbols.py LIB.so [LIB.so ...]

_C, _cuda_sim and _ascend_sim are loaded into one process. The dynamic linker
resolves every exported symbol to its first definition, and merges GNU-unique
symbols (what g++ makes of an inline variable or a function-local static with
default visibility) across all libraries, whatever Python's RTLD_LOCAL says. So a
kernel stub exported by two libraries is one object: _cuda_sim, loaded after _C,
once wrote its CPU harness's launchers into _C's stubs, and the next CUDA op
crashed. The extensions are built with hidden visibility (setup.py's HIDDEN); this
check reads each library's dynamic symbol table (`nm -D --defined-only`) and fails
when, of the project's own symbols,
  * a library exports anything but its module init, PyInit_<name>;
  * a symbol is defined by two of the libraries;
  * a library exports a GNU-unique object.
A project symbol is one in the project's C++ namespaces (PROJECT_NAMESPACES,
anywhere in the demangled name, template arguments included) or a C name of the
project's (the Ascend C kernel entries and the simulated ACL API of _ascend_sim,
op_ext_* helpers). Exit status 1 with one line per problem; 0 when clean.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("_C", "_cuda_sim", "_ascend_sim")

# Every top-level namespace the project's C++ sources open.
PROJECT_NAMESPACES = ("op_ext", "op_ext_kernel", "cuda_sim", "ascendc_sim", "AscendC", "optiling")
_NAMESPACE = re.compile(r"(?<![\w:])(?:" + "|".join(PROJECT_NAMESPACES) + r")::")
# C names: the Ascend C kernels' entries (<op>_custom, <op>_grad_custom), the ACL
# runtime and aclnn API that _ascend_sim simulates, the harness's test entries.
_C_NAME = re.compile(r"^(?:\w+_custom|acl\w*|op_ext_\w*)$")
# What a demangled name may start with before the entity it is about.
_SPECIAL = re.compile(r"^(?:guard variable for|typeinfo name for|typeinfo for|vtable for|VTT for|"
                      r"construction vtable for|non-virtual thunk to|virtual thunk to|TLS init function for|"
                      r"TLS wrapper function for|reference temporary #\d+ for) ")


@dataclass(frozen=True)
class Symbol:
    library: str
    kind: str  # nm's letter: "u" is a GNU-unique object
    mangled: str
    demangled: str


def project_symbol(demangled: str) -> bool:
    entity = _SPECIAL.sub("", demangled)
    return bool(_NAMESPACE.search(entity)) or bool(_C_NAME.match(entity))


def exported_symbols(library: Path) -> list[Symbol]:
    """The symbols `library` defines in its dynamic symbol table."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True,
                         text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    rows = [r for r in rows if len(r) == 3]
    demangled = subprocess.run(["c++filt"], input="\n".join(r[2] for r in rows), check=True, capture_output=True,
                               text=True).stdout.splitlines()
    name = library.name.split(".")[0]
    return [Symbol(name, r[1], r[2], d) for r, d in zip(rows, demangled)]


def problems(libraries: list[Path]) -> list[str]:
    """One line per broken rule (see the module's doc); empty when clean."""
    found: list[str] = []
    defined_by: dict[str, list[Symbol]] = {}
    for library in libraries:
        for s in exported_symbols(library):
            if s.mangled == f"PyInit_{s.library}" or not project_symbol(s.demangled):
                continue
            defined_by.setdefault(s.mangled, []).append(s)
            if s.kind == "u":
                found.append(f"{s.library}: exports a GNU-unique object of the project's, merged across "
                             f"libraries by the dynamic linker: {s.demangled}")
            else:
                found.append(f"{s.library}: exports a symbol of the project's (only PyInit_{s.library} "
                             f"may be exported): {s.demangled}")
    for mangled, symbols in sorted(defined_by.items()):
        if len({s.library for s in symbols}) > 1:
            found.append(f"defined by {', '.join(sorted({s.library for s in symbols}))}: {symbols[0].demangled}")
    return found


def built_libraries() -> list[Path]:
    package = ROOT / "op_extension"
    libraries = []
    for name in LIBRARIES:
        matches = sorted(package.glob(f"{name}.*.so"))
        if not matches:
            raise SystemExit(f"check_symbols: op_extension/{name}.*.so not found: build the package first")
        libraries.append(matches[0])
    return libraries


def main(argv: list[str]) -> int:
    libraries = [Path(a) for a in argv] or built_libraries()
    found = problems(libraries)
    for line in found:
        print(f"check_symbols: {line}")
    names = ", ".join(p.name for p in libraries)
    if found:
        print(f"check_symbols: {len(found)} problem(s) in {names}")
        return 1
    print(f"check_symbols: ok: {names} export no symbol of the project's but their module init, and share none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
