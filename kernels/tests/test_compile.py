"""Compiles the CUDA sources with plain nvcc for sm_120 and sm_90 (no GPU, no torch headers),
in both builds: the default (the launcher's two production variants only) and KDTREE_DIAG=1
(every diagnostic variant too). Fails on register spills, local-memory stack, >255 registers, a
block that cannot be resident, a shared-memory configuration over the architecture's per-block
limit, or a build holding other kernels than its variant table says. Each build's kernels are
listed in the run's summary ("kdtree_mla compile test"). Also checks, on the host, every slice
layout of the fused merge (staging size, bank conflicts).

nvcc comes from $NVCC, else PATH, else /usr/local/bin/nvcc or /usr/local/cuda/bin/nvcc.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
# Opt-in dynamic + static shared memory per block.
SMEM_LIMIT = {"sm_120": 101_376, "sm_90": 232_448}
MAX_REGS = 255
REGS_PER_SM = 65_536
STATIC_SMEM_LIMIT = 48 * 1024


def find_nvcc() -> str:
    for cand in (
        os.environ.get("NVCC"),
        shutil.which("nvcc"),
        "/usr/local/bin/nvcc",
        "/usr/local/cuda/bin/nvcc",
    ):
        if cand and os.path.exists(cand):
            return cand
    pytest.fail("nvcc not found (set NVCC): the compile test is required in CI")


BUILDS = {"default": [], "diag": ["-DKDTREE_DIAG=1"]}
# fp8 KV dtypes (csrc/params.h KvDtype) the launcher's variants are compiled for, as the summary
# names them.
FP8_KV = {1: ", fp8 e4m3 KV", 2: ", fp8 e5m2 KV"}


def ptxas_report(arch: str, build: str, tmp_path: pathlib.Path) -> dict[str, dict[str, int]]:
    cmd = [
        find_nvcc(),
        "-std=c++17",
        *BUILDS[build],
        "-O3",
        "--use_fast_math",
        "-Xptxas",
        "-v",
        f"-gencode=arch=compute_{arch[3:]},code={arch}",
        "-I",
        str(CSRC),
        "-c",
        str(CSRC / "verify_launch.cu"),
        "-o",
        str(tmp_path / f"verify_{arch}.o"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"nvcc failed for {arch}:\n{res.stderr}"
    funcs: dict[str, dict[str, int]] = {}
    cur = None
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
        if m:
            cur = m.group(1)
            funcs[cur] = {}
            continue
        if cur is None:
            continue
        m = re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        )
        if m:
            funcs[cur].update(
                stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3))
            )
        m = re.search(r"Used (\d+) registers", line)
        if m:
            funcs[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            funcs[cur]["smem"] = int(s.group(1)) if s else 0
    return funcs


@functools.cache
def launch_config(build: str = "default") -> dict:
    gxx = shutil.which("g++") or shutil.which("c++")
    if gxx is None:
        pytest.fail("a host C++ compiler is needed to evaluate traits.h")
    exe = ROOT / "tests" / f".smem_probe_{build}"
    subprocess.run(
        [
            gxx,
            "-std=c++17",
            *BUILDS[build],
            "-O2",
            "-I",
            str(CSRC),
            str(ROOT / "tests" / "smem_probe.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        timeout=120,
    )
    try:
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    finally:
        exe.unlink(missing_ok=True)
    cfg: dict = {"variants": {}}
    for line in out.splitlines():
        key, *vals = line.split()
        if key.startswith("variant") and key[7:].isdigit():
            stages, pipe, smem, mode, threads = (int(v) for v in vals)
            cfg["variants"][int(key[7:])] = {
                "stages": stages,
                "pipe": pipe,
                "smem": smem,
                "mode": mode,
                "threads": threads,
            }
        else:
            cfg[key] = int(vals[0])
    return cfg


def variant_name(var: dict) -> str:
    """A variant as the summary lists it, e.g. "3 stages, 2 load warps"."""
    name = f"{var['stages']} stages{', pipelined' if var['pipe'] else ''}"
    name += f", {(var['threads'] - 256) // 32} load warps"
    mode = {0: "", 2: ", loads only", 4: ", math only", 8: ", traced"}[var["mode"]]
    return name + mode


@pytest.mark.parametrize("build", ["default", "diag"])
@pytest.mark.parametrize("arch", ["sm_120", "sm_90"])
def test_kernels_compile_without_spills_and_fit(arch, build, tmp_path, compile_summary):
    funcs = ptxas_report(arch, build, tmp_path)
    cfg = launch_config(build)
    main = {n: f for n, f in funcs.items() if "verify_main" in n}
    combine = {n: f for n, f in funcs.items() if "verify_combine_kernel" in n}
    traced = any(var["mode"] & 8 for var in cfg["variants"].values())
    # The combine kernel: plain, and in the diagnostic build also for the traced variant. The
    # launcher's two variants are also compiled for each fp8 KV type (e4m3, e5m2).
    fp8 = [(v, kv) for v in (cfg["variant_sm120"], cfg["variant_sm90"]) for kv in FP8_KV]
    assert len(main) == len(cfg["variants"]) + len(fp8) and len(combine) == 1 + traced, (
        f"unexpected kernels: {sorted(funcs)}"
    )
    if build == "default":
        # Production only: the launcher's two picks, both computing the output.
        picks = {cfg["variant_sm120"], cfg["variant_sm90"]}
        assert set(cfg["variants"]) == picks and len(picks) == 2, cfg["variants"]
        assert all(var["mode"] == 0 for var in cfg["variants"].values())
    else:
        assert len(cfg["variants"]) > 2 and traced, "the diagnostic build has its variants"
    for name, f in funcs.items():
        assert f["spill_st"] == 0 and f["spill_ld"] == 0, f"{arch} {name}: spills {f}"
        assert f["stack"] == 0, f"{arch} {name}: {f['stack']} B stack frame (local memory)"
        assert f["regs"] <= MAX_REGS, f"{arch} {name}: {f['regs']} registers"
        assert f["smem"] <= STATIC_SMEM_LIMIT, f"{arch} {name}: static smem {f['smem']}"
    chosen = cfg["variant_sm120"] if arch == "sm_120" else cfg["variant_sm90"]
    checked = 0
    built = []
    for v, kv in [(v, 0) for v in cfg["variants"]] + fp8:
        var = cfg["variants"][v]
        f = main[kernel_symbol(main, var, kv)]
        # Registers are allocated per warp in units of 256 and each of the 4 schedulers has a
        # quarter of the file: the scheduler holding the most warps must fit them.
        regs_alloc = -(-f["regs"] // 8) * 8
        warps_per_scheduler = -(-var["threads"] // 32 // 4)
        assert regs_alloc * 32 * warps_per_scheduler <= REGS_PER_SM // 4, (
            f"{arch} variant {v}: {f['regs']} regs x {var['threads']} threads"
        )
        pick = " [launcher's pick]" if v == chosen else ""
        name = variant_name(var) + FP8_KV.get(kv, "")
        if var["smem"] > SMEM_LIMIT[arch]:  # compiled empty: it cannot launch on this arch
            built.append(f"  {v}: {name}: empty ({var['smem']} B smem > the limit)")
        else:
            built.append(
                f"  {v}: {name}: {f['regs']} regs, {f['smem']} static + "
                f"{var['smem']} dynamic B smem, 0 spills{pick}"
            )
        if v == chosen:
            assert f["smem"] + var["smem"] <= SMEM_LIMIT[arch], (
                f"{arch}: main kernel needs {f['smem']} static + {var['smem']} dynamic B"
                f" > {SMEM_LIMIT[arch]}"
            )
            checked += 1
    assert checked == 1 + len(FP8_KV), f"{arch}: the launcher's variant {chosen} is not compiled"
    compile_summary.append(
        f"{arch} {build} build: {len(main)} main kernel(s) + {len(combine)} combine kernel(s), "
        f"smem limit {SMEM_LIMIT[arch]} B\n" + "\n".join(built)
    )


def kernel_symbol(main: dict, var: dict, kv: int = 0) -> str:
    """The mangled name of the main kernel compiled for a variant and KV dtype (csrc/params.h
    KvDtype: 0 bf16, 1 e4m3, 2 e5m2), exactly one."""
    loaders = (var["threads"] - 256) // 32
    tag = (
        f"verify_main_kernelILi{var['stages']}ELb{var['pipe']}ELi{var['mode']}ELi{loaders}ELi{kv}EE"
    )
    names = [n for n in main if tag in n]
    assert len(names) == 1, f"no single main kernel {tag} among {sorted(main)}"
    return names[0]


@pytest.mark.parametrize("build", ["default", "diag"])
def test_sm120_gets_a_config_within_its_smem_limit(build):
    cfg = launch_config(build)
    small = cfg["variants"][cfg["variant_sm120"]]
    assert small["smem"] <= SMEM_LIMIT["sm_120"]
    # Every variant bigger than sm_120's limit is one the launcher can never pick there.
    for v, var in cfg["variants"].items():
        if var["smem"] > SMEM_LIMIT["sm_120"]:
            assert v != cfg["variant_sm120"]


def test_fused_merge_slices_fit_and_have_no_bank_conflicts():
    """Every slice a fused merge can take (2..512 parts, 1..32 rows, ticketed or not), with the
    layout the kernel computes (traits.h merge_slice): its staging fits the two stages sm_120's
    variant has, its weights fit the S-partial buffer, and no quarter warp of the granule loop
    reads two addresses in one bank group. A packed layout (no padding between parts) must show
    conflicts, or the check would not be checking anything."""
    cfg = launch_config()
    assert cfg["merge_slices"] > 1_000_000
    assert cfg["merge_misaligned"] == 0
    assert cfg["merge_worst_stage_bytes"] <= 2 * cfg["stage_bytes"]
    assert cfg["merge_worst_weight_bytes"] <= cfg["red_bytes"]
    assert cfg["merge_max_pad_units"] <= 7
    assert cfg["merge_conflicts"] == 0
    assert cfg["merge_packed_conflicts"] > 0
