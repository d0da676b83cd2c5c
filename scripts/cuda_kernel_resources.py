"""The registers and static shared memory ptxas gives every CUDA kernel, for
scripts/check_cuda_compile.sh; the occupancy model (op_extension/cuda_occupancy.py)
reads them.

    python scripts/cuda_kernel_resources.py --ptxas out/*.ptxas --elf out/*.elf --write TABLE
    python scripts/cuda_kernel_resources.py --ptxas out/*.ptxas --elf out/*.elf --check TABLE

Reads nvcc -Xptxas -v reports (every arch compiled: 'Compiling entry function
'<mangled>' for 'sm_NN'', then 'Used R registers, ..., S bytes smem') and
`cuobjdump -elf` dumps (each kernel's EIATTR_MAX_THREADS: its __launch_bounds__,
a property of the source, the same for every arch: max_threads), names
each kernel as the harness does (cuda_occupancy.normalize_signature of the
c++filt name) and writes the table, or compares it with TABLE: a kernel whose
registers, shared memory or launch bound changed, a new kernel and a kernel no longer built
each fail, by name, with the command that refreshes the table. A table written
by another nvcc is not compared (another compiler allocates registers
differently): that is said, and the check passes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # as when run as a script, also when a test loads it by path
from cuda_kernel_check import ENTRY, Report, demangled, parse_elf  # noqa: E402
_spec = importlib.util.spec_from_file_location("cuda_occupancy", ROOT / "op_extension" / "cuda_occupancy.py")
cuda_occupancy = importlib.util.module_from_spec(_spec)
sys.modules["cuda_occupancy"] = cuda_occupancy  # its dataclasses look their module up
_spec.loader.exec_module(cuda_occupancy)

REFRESH = "bash scripts/check_cuda_compile.sh --write-resources"


def parse(texts: list[str]) -> dict[str, dict[str, dict]]:
    """{arch: {mangled name: {"registers", "static_shared_bytes"}}} of ptxas -v reports."""
    archs: dict[str, dict[str, dict]] = {}
    for text in texts:
        current = None
        for line in text.splitlines():
            m = ENTRY.search(line)
            if m:
                current = archs.setdefault(m.group(2), {}).setdefault(m.group(1), {})
                continue
            m = re.search(r"Used (\d+) registers", line)
            if m and current is not None:
                current["registers"] = int(m.group(1))
                smem = re.search(r"(\d+) bytes smem", line)
                current["static_shared_bytes"] = int(smem.group(1)) if smem else 0
                current = None
    return archs


def add_launch_bounds(archs: dict[str, dict[str, dict]], elf_texts: list[str]) -> None:
    """Each kernel's __launch_bounds__ maximum from the ELF dumps, as max_threads
    in its entry of every arch (kernels without one get none)."""
    report = Report()
    for text in elf_texts:
        parse_elf(text, report)
    for kernels in archs.values():
        for name, resources in kernels.items():
            k = report.kernels.get(name)
            if k is not None and k.max_threads is not None:
                resources["max_threads"] = k.max_threads


def table(archs: dict[str, dict[str, dict]], nvcc: str) -> dict:
    pretty = demangled(sorted({name for kernels in archs.values() for name in kernels}))
    result = {"nvcc": nvcc, "archs": {}}
    for arch, kernels in sorted(archs.items()):
        entries = {}
        for name, resources in kernels.items():
            if "registers" not in resources:
                raise SystemExit(f"cuda_kernel_resources: no 'Used N registers' line for {pretty[name]} ({arch})")
            entries[cuda_occupancy.normalize_signature(pretty[name])] = resources
        result["archs"][arch] = dict(sorted(entries.items()))
    return result


def differences(committed: dict, fresh: dict) -> list[str]:
    found = []
    for arch in sorted(set(committed["archs"]) | set(fresh["archs"])):
        old, new = committed["archs"].get(arch, {}), fresh["archs"].get(arch, {})
        for kernel in sorted(set(old) | set(new)):
            if kernel not in old:
                found.append(f"{arch}: {kernel}: new kernel, not in the table")
            elif kernel not in new:
                found.append(f"{arch}: {kernel}: in the table, no longer built")
            elif old[kernel] != new[kernel]:
                found.append(f"{arch}: {kernel}: {old[kernel]} in the table, {new[kernel]} now")
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ptxas", nargs="+", required=True)
    parser.add_argument("--elf", nargs="+", default=[], help="cuobjdump -elf dumps of the same objects")
    parser.add_argument("--nvcc", required=True, help="the compiler's version, e.g. 'V13.0.88'")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="TABLE")
    mode.add_argument("--check", metavar="TABLE")
    args = parser.parse_args(argv)
    archs = parse([Path(p).read_text() for p in args.ptxas])
    if not archs:
        print("cuda_kernel_resources: no kernel in the ptxas reports (was -Xptxas -v passed?)")
        return 1
    add_launch_bounds(archs, [Path(p).read_text() for p in args.elf])
    fresh = table(archs, args.nvcc)
    counts = ", ".join(f"{len(k)} for {a}" for a, k in fresh["archs"].items())
    if args.write:
        Path(args.write).write_text(json.dumps(fresh, indent=1) + "\n")
        print(f"   kernel resources written to {args.write}: {counts}")
        return 0
    committed = json.loads(Path(args.check).read_text())
    if committed.get("nvcc") != args.nvcc:
        print(f"   kernel resources: {args.check} was written by nvcc {committed.get('nvcc')}, this is {args.nvcc}: "
              f"not compared (the occupancy model uses the table's figures)")
        return 0
    found = differences(committed, fresh)
    for line in found:
        print(f"cuda_kernel_resources: {line}")
    if found:
        print(f"cuda_kernel_resources: {args.check} is out of date ({len(found)} differences above): refresh it "
              f"with `{REFRESH}` and commit it")
        return 1
    print(f"   kernel resources match {args.check}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
