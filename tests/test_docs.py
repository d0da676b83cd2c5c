"""Every ```python block of README.md and docs/*.md runs as pasted.

Each block runs alone, in a fresh interpreter (this venv's python) with an empty
temporary folder as the working directory, as a reader who pastes it would run
it. A block that needs hardware this machine cannot have (an Ascend NPU, a GPU)
may be exempted by an HTML comment on the line before its opening fence,

    <!-- not-run: needs an Ascend NPU -->

and the comment must say why; anything else fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
NOT_RUN = re.compile(r"^<!--\s*not-run:(.*?)-->\s*$")


@dataclass
class Block:
    path: Path
    line: int          # 1-based line of the opening fence
    language: str
    code: str
    not_run: str | None  # the exemption's reason ("" when it gives none), None when not exempted

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def extract_blocks(path: Path) -> list[Block]:
    """Fenced code blocks of a Markdown file, with the not-run comment before each."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        end = i + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        previous = lines[i - 1].strip() if i else ""
        marker = NOT_RUN.match(previous)
        blocks.append(Block(path, i + 1, language, "\n".join(lines[i + 1:end]) + "\n",
                            marker.group(1).strip() if marker else None))
        i = end + 1
    return blocks


def stray_markers(path: Path) -> list[int]:
    """Lines of not-run comments that are not right before a python block."""
    lines = path.read_text().splitlines()
    starts = {b.line for b in extract_blocks(path) if b.language == "python"}
    return [n + 1 for n, line in enumerate(lines) if NOT_RUN.match(line.strip()) and n + 2 not in starts]


PYTHON_BLOCKS = [b for path in DOCS for b in extract_blocks(path) if b.language == "python"]


def test_the_blocks_are_found():
    # A broken extractor would make every test below vacuous.
    found = {b.path.name for b in PYTHON_BLOCKS}
    assert {"README.md", "transformers.md", "ascend.md"} <= found, found
    readme = [b for b in PYTHON_BLOCKS if b.path.name == "README.md"]
    assert any("oxt.patch(model)" in b.code for b in readme), "README's 'Use with Hugging Face' block"


def test_extractor_reads_markers_and_fences(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n<!-- not-run: needs an Ascend NPU -->\n```python\nimport torch_npu\n```\n"
                   "```bash\necho hi\n```\n<!--not-run:-->\n```python\nx = 1\n```\n```python\ny = 2\n```\n")
    blocks = extract_blocks(doc)
    assert [(b.line, b.language, b.not_run) for b in blocks] == [
        (3, "python", "needs an Ascend NPU"), (6, "bash", None), (10, "python", ""), (13, "python", None)]
    assert blocks[0].code == "import torch_npu\n"


def test_every_exemption_names_a_reason():
    missing = [b.id for b in PYTHON_BLOCKS if b.not_run is not None and not b.not_run]
    assert not missing, f"not-run comments without a reason: {missing}"


def test_no_stray_exemption_markers():
    stray = [f"{p.relative_to(ROOT)}:{n}" for p in DOCS for n in stray_markers(p)]
    assert not stray, f"not-run comments not right before a ```python block: {stray}"


@pytest.mark.parametrize("block", [b for b in PYTHON_BLOCKS if b.not_run is None], ids=lambda b: b.id)
def test_python_block_runs_as_pasted(block, tmp_path):
    # A block that tunes writes the tuning cache: into this test's folder, not the user's.
    env = {**os.environ, "OP_EXT_TUNE_CACHE": str(tmp_path / "tuning")}
    result = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, f"{block.id} fails when pasted:\n{block.code}\n{result.stderr[-4000:]}"
