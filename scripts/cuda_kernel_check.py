"""Resource and code checks of compiled CUDA kernels, for scripts/check_cuda_compile.sh.

Reads what the toolkit reports about object files compiled for sm_90 (each
option takes one file per object; all are checked as one set):
  --ptxas   ptxas's resource usage (nvcc -Xptxas -v: registers, spill stores/loads)
  --elf     `cuobjdump -elf -arch sm_90`: each kernel's EIATTR_MAX_THREADS, which
            __launch_bounds__ sets
  --sass    `cuobjdump -sass -arch sm_90`: the kernels' machine code
and fails, naming the kernel and the rule, when
  * a kernel spills registers to local memory (spill stores or loads > 0 bytes):
    each spill is a round trip to memory in what should be register-only code;
  * a kernel's registers do not fit its largest block on one SM: registers are
    allocated 8 per thread at a time (256 per warp), and an SM has 65536, so
    ceil8(registers) x max threads must be <= 65536. The max threads are those
    of __launch_bounds__, or 1024 (any block may have that many) for a kernel
    without it, which the launch would refuse ("too many resources requested");
  * a kernel on the 128-bit path of the elementwise ops (map_kernel and
    add_kernel with 16 bytes per access: float x4, double x2, __half and
    __nv_bfloat16 x8) has no 128-bit global load (LDG.E.128 on sm_90): its main
    loop would read 4 or 8 bytes at a time, a fraction of the bandwidth.
--expect-vector NAME (repeatable): a float32 128-bit kernel whose name contains
NAME must exist, so that a renamed kernel cannot pass unchecked.
--expect-vector-from FILE...: the same for every name read from these kernel
sources (.cu): the functor of each launch_map call (its map_kernel) and each
kernel of the 128-bit path a launch_kernel<...> names, so that a new op's
elementwise kernel is expected without a line naming it in a shared file.
Exit status 1 on any failure; every failure is printed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field

ARCH = "sm_90"
SM_REGISTERS = 65536
MAX_BLOCK_THREADS = 1024
REGISTER_GRANULE = 8  # per thread: 256 registers per warp at a time

# The elementwise kernels' 128-bit instantiations: T and kVec with kVec * sizeof(T) == 16.
VECTOR_KERNELS = ("map_kernel", "add_kernel")
VECTOR_KERNEL = re.compile(rf"\b({'|'.join(VECTOR_KERNELS)})<(float, 4|double, 2|__half, 8|__nv_bfloat16, 8)\b")
FLOAT_VECTOR_KERNEL = re.compile(rf"\b({'|'.join(VECTOR_KERNELS)})<float, 4\b")
LOAD_128 = re.compile(r"\bLDG(\.[A-Z0-9_]+)*\.128\b")
# ptxas -v names each kernel before its report (scripts/cuda_kernel_resources.py reads it too).
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")


@dataclass
class Kernel:
    registers: int | None = None
    spill_stores: int = 0
    spill_loads: int = 0
    max_threads: int | None = None  # from __launch_bounds__
    loads_128: int = 0
    has_sass: bool = False
    demangled: str = ""


@dataclass
class Report:
    kernels: dict[str, Kernel] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel:
        return self.kernels.setdefault(name, Kernel())


def parse_ptxas(text: str, report: Report) -> None:
    """ptxas -v: 'Compiling entry function 'K' for 'sm_90'', then its spill line and
    'Used N registers'. Lines of other architectures are skipped."""
    current = None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            current = m.group(1) if m.group(2) == ARCH else None
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            k = report.kernel(current)
            k.spill_stores, k.spill_loads = int(m.group(1)), int(m.group(2))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            report.kernel(current).registers = int(m.group(1))


def parse_elf(text: str, report: Report) -> None:
    """cuobjdump -elf: the '.nv.info.<kernel>' section lists EIATTR_MAX_THREADS
    (x y z) for kernels with __launch_bounds__."""
    current = None
    want_value = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = re.match(r"\.nv\.info\.(\S+)$", line)
            current = m.group(1) if m else None
            want_value = False
            continue
        if current is None:
            continue
        if "EIATTR_MAX_THREADS" in line:
            want_value = True
        elif want_value and "Value:" in line:
            dims = [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", line)]
            threads = 1
            for d in dims:
                threads *= d
            report.kernel(current).max_threads = threads
            want_value = False


def parse_sass(text: str, report: Report) -> None:
    current = None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = report.kernel(m.group(1))
            current.has_sass = True
            continue
        if current is not None and LOAD_128.search(line):
            current.loads_128 += 1


def call_args(text: str, start: int) -> list[str]:
    """The top-level arguments of the call whose '(' ends at `start`."""
    args, depth, current = [], 0, []
    for ch in text[start:]:
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    args.append("".join(current).strip())
    return args


def vector_names_in_sources(paths: list[str]) -> list[str]:
    """What must have a float32 128-bit kernel, read from the kernel sources: the
    functor each launch_map(ptrs, n, functor, stream) call gives map_kernel, and
    each kernel of VECTOR_KERNELS that a launch_kernel<...> names."""
    names = set()
    for path in paths:
        with open(path) as f:
            text = re.sub(r"//[^\n]*", "", f.read())
        for call in re.finditer(r"\blaunch_map\(", text):
            args = call_args(text, call.end())
            functor = re.match(r"[A-Za-z_]\w*", args[2]) if len(args) == 4 else None
            if functor is None:
                raise SystemExit(f"cuda_kernel_check: {path}: a launch_map call without a functor as its "
                                 f"third of four arguments: {', '.join(args)}")
            names.add(functor.group(0))
        names.update(re.findall(rf"\blaunch_kernel<\s*({'|'.join(VECTOR_KERNELS)})<", text))
    return sorted(names)


def demangled(names: list[str]) -> dict[str, str]:
    """{mangled name: c++filt's name} of `names`."""
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def demangle(report: Report) -> None:
    for name, pretty in demangled(list(report.kernels)).items():
        report.kernels[name].demangled = pretty


def check(report: Report, expect_vector: list[str]) -> list[str]:
    errors = []
    for name, k in sorted(report.kernels.items(), key=lambda kv: kv[1].demangled):
        label = f"kernel {k.demangled} ({ARCH})"
        if k.registers is None:
            continue  # a device function, not an entry
        if k.spill_stores or k.spill_loads:
            errors.append(f"{label}: spills registers: {k.spill_stores} bytes spill stores, {k.spill_loads} bytes "
                          f"spill loads (ptxas, {k.registers} registers). Rule: no kernel spills; keep fewer values "
                          f"live, or give it more registers (a smaller __launch_bounds__)")
        threads = k.max_threads if k.max_threads is not None else MAX_BLOCK_THREADS
        allocated = -(-k.registers // REGISTER_GRANULE) * REGISTER_GRANULE
        if allocated * threads > SM_REGISTERS:
            bound = (f"__launch_bounds__({threads})" if k.max_threads is not None
                     else f"no __launch_bounds__, so a block of up to {MAX_BLOCK_THREADS} threads")
            errors.append(f"{label}: {k.registers} registers ({allocated} allocated) x {threads} threads "
                          f"({bound}) = {allocated * threads} > {SM_REGISTERS} registers of an SM: such a block "
                          f"cannot launch. Rule: registers x max threads per block <= {SM_REGISTERS}; declare the "
                          f"block size the launcher uses with __launch_bounds__")
    for name, k in sorted(report.kernels.items(), key=lambda kv: kv[1].demangled):
        if k.has_sass and VECTOR_KERNEL.search(k.demangled) and k.loads_128 == 0:
            errors.append(f"kernel {k.demangled} ({ARCH}): no 128-bit global load (LDG.E.128) in its SASS. Rule: "
                          f"the 16-bytes-per-access path of the elementwise kernels loads with 128-bit accesses")
    float_vector = [k.demangled for k in report.kernels.values() if k.has_sass and FLOAT_VECTOR_KERNEL.search(k.demangled)]
    for wanted in expect_vector:
        if not any(wanted in n for n in float_vector):
            errors.append(f"no float32 128-bit elementwise kernel (map_kernel/add_kernel<float, 4>) for '{wanted}' in "
                          f"the SASS: renamed or gone? The 128-bit load check would not see it")
    return errors


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ptxas", nargs="+", required=True)
    parser.add_argument("--elf", nargs="+", required=True)
    parser.add_argument("--sass", nargs="+", required=True)
    parser.add_argument("--expect-vector", action="append", default=[])
    parser.add_argument("--expect-vector-from", nargs="+", default=[])
    args = parser.parse_args(argv)
    from_sources = vector_names_in_sources(args.expect_vector_from)
    if args.expect_vector_from and not from_sources:
        print("cuda_kernel_check: no launch_map call and no launch of " + " or ".join(VECTOR_KERNELS) +
              " in " + " ".join(args.expect_vector_from) + ": renamed? The 128-bit load check would see nothing")
        return 1
    expect_vector = args.expect_vector + from_sources
    report = Report()
    for parse, paths in ((parse_ptxas, args.ptxas), (parse_elf, args.elf), (parse_sass, args.sass)):
        for path in paths:
            with open(path) as f:
                parse(f.read(), report)
    demangle(report)
    entries = [k for k in report.kernels.values() if k.registers is not None]
    if not entries:
        print(f"cuda_kernel_check: no kernel in ptxas's output for {ARCH} (was -Xptxas -v passed?)")
        return 1
    errors = check(report, expect_vector)
    for e in errors:
        print(f"cuda_kernel_check: {e}")
    vector = sum(1 for k in report.kernels.values() if k.has_sass and VECTOR_KERNEL.search(k.demangled))
    print(f"   {len(entries)} kernels for {ARCH}: {len(errors)} failures; most registers "
          f"{max(k.registers for k in entries)}; {vector} elementwise kernels on the 128-bit path")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
