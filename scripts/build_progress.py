#!/usr/bin/env python3
"""Runs a build command (pip install -v ... -e .) and shows its progress: one line
per compiled object instead of minutes of silence (pip without -v) or tens of
thousands of lines of compiler command lines and header warnings (pip -v).

    python scripts/build_progress.py LOG COMMAND...

All of the command's output goes to LOG. On the terminal:

    build: started; one line per compiled file, the whole output in build/build.log
    build: op_extension._C
    build: [ 3/18]  0:17  build/generated/isa/activation.default.cpp
    build: linking op_extension._C
    ...
    build: done in 3:52 (pip's full output: build/build.log)

plus every compiler error, and warnings located in this repository's own sources
(those in torch's headers, thousands of lines on every build, are only counted).
When the command fails, the error lines and the log's last lines are printed
again, and the exit status is the command's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")              # ninja: one compile
EXTENSION = re.compile(r"^building '([\w.]+)' extension$")  # setuptools: an extension starts
DIAGNOSTIC = re.compile(r"^(\S+?):\d+(?::\d+)?: (fatal error|error|warning): ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _elapsed(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _source(command: str) -> str:
    """The file a compiler command line compiles (after -c), relative to the repo."""
    try:
        args = shlex.split(command)
    except ValueError:
        args = command.split()
    for flag, value in zip(args, args[1:]):
        if flag == "-c" and not value.startswith("-"):  # torch's rule has "-c -c <source>"
            path = Path(value)
            try:
                return path.resolve().relative_to(ROOT).as_posix()
            except ValueError:
                return value
    return command[:100]


def _compiler_call(text: str) -> list[str] | None:
    """The arguments of a compiler command line setuptools prints (links always;
    compiles too where ninja is missing), or None for other lines."""
    args = text.split()
    if args and Path(args[0]).name in ("ccache", "sccache"):  # a compiler cache in front (setup.py)
        args = args[1:]
    if not args or Path(args[0]).name not in ("c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc"):
        return None
    return args


class Filter:
    def __init__(self, out, start: float):
        self.out, self.start = out, start
        self.extension = None
        self.errors: list[str] = []
        self.hidden_warnings = 0

    def say(self, text: str) -> None:
        self.out.write(f"build: {text}\n")
        self.out.flush()

    def line(self, raw: str) -> None:
        text = ANSI.sub("", raw).strip()
        if m := EXTENSION.match(text):
            self.extension = m.group(1)
            self.say(self.extension)
        elif m := STEP.match(text):
            done, total = m.group(1), m.group(2)
            self.say(f"[{done:>{len(total)}}/{total}] {_elapsed(time.monotonic() - self.start):>5}  "
                     f"{_source(m.group(3))}")
        elif (args := _compiler_call(text)) is not None:
            if "-shared" in args:
                self.say(f"linking {self.extension or '?'}")
            elif "-c" in args:  # a build without ninja: no counts
                self.say(f"{_elapsed(time.monotonic() - self.start):>5}  {_source(text)}")
        elif text.startswith("op_extension:"):  # setup.py's own messages (no ninja, NPU build steps)
            self.out.write(text + "\n")
        elif text.startswith("FAILED:") or "error:" in text and DIAGNOSTIC.match(text) is None:
            self.errors.append(text)
            self.out.write(text + "\n")
        elif m := DIAGNOSTIC.match(text):
            if m.group(2) != "warning":
                self.errors.append(text)
                self.out.write(text + "\n")
            elif self._ours(m.group(1)):
                self.out.write(text + "\n")
            else:
                self.hidden_warnings += 1

    @staticmethod
    def _ours(path: str) -> bool:
        p = Path(path)
        # A relative path is relative to the compiler's working directory, which
        # is build/temp.* under ninja: ccache (setup.py's compiler_cache()) makes
        # the paths inside the tree relative, e.g. ../../op_extension/csrc/...
        # (build/temp.<platform>: two levels down, which is all that resolving needs).
        for candidate in [p] if p.is_absolute() else [ROOT / p, ROOT / "build" / "temp" / p]:
            try:
                candidate.resolve().relative_to(ROOT / "op_extension")
                return True
            except ValueError:
                continue
        return False


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    log_path, command = Path(argv[0]), argv[1:]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    filt = Filter(sys.stdout, start)
    filt.say(f"started; one line per compiled file, the whole output in {log_path}")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                text=True, errors="replace", bufsize=1)
        assert proc.stdout is not None
        for raw in proc.stdout:
            log.write(raw)
            filt.line(raw)
        rc = proc.wait()
    took = _elapsed(time.monotonic() - start)
    if filt.hidden_warnings:
        filt.say(f"{filt.hidden_warnings} warnings outside op_extension/ (torch's and the compiler's "
                 "headers) not shown")
    if rc == 0:
        filt.say(f"done in {took} (pip's full output: {log_path})")
        return 0
    tail = log_path.read_text(errors="replace").splitlines()[-25:]
    filt.say(f"FAILED after {took} (exit status {rc}); last lines of {log_path}:")
    for text in tail:
        print("  " + ANSI.sub("", text), flush=True)
    if filt.errors:
        filt.say("errors:")
        for text in dict.fromkeys(filt.errors):
            print("  " + text, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
