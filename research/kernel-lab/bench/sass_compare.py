"""Compares the SASS of two builds of the kernel, kernel by kernel, on a machine without a GPU.

A change outside the block loop can still make ptxas allocate the loop's registers differently,
and such codegen changes alone have moved the timings by up to 2% (research/kernel-history.md,
sessions 9, 15-17). This prints, for each kernel whose name contains --kernel: its instruction
count in both builds, and its block loop (first to last HMMA) compared three ways: the same
text, the same shapes (opcodes and operands with register, predicate and immediate numbers
masked), and the ratio of matching opcodes.

Inputs are objects or cubins built with nvcc (`-c verify_launch.cu`), or `cuobjdump -sass`
listings. cuobjdump comes from $CUOBJDUMP, PATH, or a Triton wheel (which ships one), e.g.
  CUOBJDUMP=$(python3 research/kernel-lab/bench/sass_compare.py --find-cuobjdump) ...
  python3 research/kernel-lab/bench/sass_compare.py old.o new.o --kernel verify_main_kernelILi3ELb0ELi0ELi2E
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

FUNC_RE = re.compile(r"\s+Function : (\S+)")
INSTR_RE = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
WHEEL_GLOBS = ("/opt/pypi/files/triton-*.whl", os.path.expanduser("~/.cache/pip/**/triton-*.whl"))


def find_cuobjdump() -> str:
    """A cuobjdump binary: $CUOBJDUMP, PATH, else one unpacked from a Triton wheel."""
    for cand in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")):
        if cand and os.access(cand, os.X_OK):
            return cand
    wheels = sorted(w for g in WHEEL_GLOBS for w in glob.glob(g, recursive=True))
    if not wheels:
        raise SystemExit(
            "cuobjdump not found: set CUOBJDUMP, put it on PATH, or provide a Triton wheel "
            f"(searched {', '.join(WHEEL_GLOBS)})"
        )
    dest = os.path.join(tempfile.gettempdir(), "kdtree_cuobjdump")
    exe = os.path.join(dest, "cuobjdump")
    if not all(os.access(os.path.join(dest, t), os.X_OK) for t in ("cuobjdump", "nvdisasm")):
        os.makedirs(dest, exist_ok=True)
        with zipfile.ZipFile(wheels[-1]) as z:
            for tool in ("cuobjdump", "nvdisasm"):  # cuobjdump -sass runs nvdisasm
                member = next((n for n in z.namelist() if n.endswith(f"/bin/{tool}")), None)
                if member is None:
                    raise SystemExit(f"{wheels[-1]} has no bin/{tool}")
                with z.open(member) as src, open(os.path.join(dest, tool), "wb") as out:
                    out.write(src.read())
                os.chmod(os.path.join(dest, tool), 0o755)
    return exe


def sass_text(path: str) -> str:
    """The SASS listing of `path`: read as is if it is one, else disassembled."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF":
        exe = find_cuobjdump()
        env = dict(os.environ, PATH=os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""))
        res = subprocess.run(
            [exe, "-sass", path], capture_output=True, text=True, check=False, env=env
        )
        if res.returncode != 0:
            raise SystemExit(f"cuobjdump failed on {path}:\n{res.stderr}")
        return res.stdout
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def functions(text: str) -> dict[str, list[str]]:
    """Instruction text of each function, in order (the last listing of a name wins)."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = FUNC_RE.match(line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        m = INSTR_RE.match(line)
        if m and cur is not None:
            out[cur].append(m.group(1))
    return out


def shape(instr: str) -> str:
    instr = re.sub(r"0x[0-9a-f]+", "#", instr)
    instr = re.sub(r"\bU?R\d+\b", "R", instr)
    return re.sub(r"\bU?P\d\b", "P", instr)


def block_loop(instrs: list[str]) -> list[str]:
    hits = [i for i, x in enumerate(instrs) if "HMMA" in x]
    return instrs[hits[0] : hits[-1] + 1] if hits else []


def compare(old: dict[str, list[str]], new: dict[str, list[str]], key: str) -> list[dict]:
    rows = []
    for name in sorted(old):
        if key not in name or name not in new:
            continue
        la, lb = block_loop(old[name]), block_loop(new[name])
        ops_a, ops_b = [x.split()[0] for x in la], [x.split()[0] for x in lb]
        rows.append(
            {
                "kernel": name,
                "instrs": (len(old[name]), len(new[name])),
                "loop": (len(la), len(lb)),
                "loop_text_same": la == lb,
                "loop_shape_same": [shape(x) for x in la] == [shape(x) for x in lb],
                "loop_opcode_ratio": difflib.SequenceMatcher(
                    None, ops_a, ops_b, autojunk=False
                ).ratio(),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?")
    ap.add_argument(
        "--kernel", default="verify_main_kernel", help="substring of the kernels' names"
    )
    ap.add_argument("--find-cuobjdump", action="store_true", help="print cuobjdump's path and exit")
    args = ap.parse_args(argv)
    if args.find_cuobjdump:
        print(find_cuobjdump())
        return 0
    if not (args.old and args.new):
        ap.error("give two builds (objects, cubins or SASS listings)")
    rows = compare(functions(sass_text(args.old)), functions(sass_text(args.new)), args.kernel)
    if not rows:
        print(f"no kernel matching {args.kernel!r} in both builds", file=sys.stderr)
        return 2
    print(
        "| kernel | instructions old / new | block loop old / new | loop text same | loop shapes same | loop opcodes matching |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['kernel'][:80]} | {r['instrs'][0]} / {r['instrs'][1]} | {r['loop'][0]} / {r['loop'][1]} | "
            f"{'yes' if r['loop_text_same'] else 'no'} | {'yes' if r['loop_shape_same'] else 'no'} | "
            f"{100 * r['loop_opcode_ratio']:.1f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
