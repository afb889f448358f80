"""bench/sass_compare.py on hand-written listings (CPU only, no cuobjdump needed)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sass_compare", ROOT / "bench" / "sass_compare.py")
sass_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sass_compare)


def listing(name, body):
    lines = [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
    for i, ins in enumerate(body):
        lines.append(f"        /*{i * 16:04x}*/                   {ins} ;   /* 0x000000000000 */")
        lines.append("                                                     /* 0x000fe2000000 */")
    return "\n".join(lines) + "\n"


LOOP = [  # the block loop: first to last HMMA
    "HMMA.16816.F32.BF16 R56, R40, R54, R56",
    "LDSM.16.M88.4 R56, [R141]",
    "IMAD R52, R142, 0x20, R149",
    "HMMA.16816.F32.BF16 R60, R44, R54, R60",
]
KERNEL = "_ZN10kdtree_mla6detail18verify_main_kernelILi3ELb0ELi0ELi2EEEvNS_12VerifyParamsE"


def test_parses_functions_and_instructions():
    text = listing(KERNEL, ["MOV R1, c[0x0][0x28]", *LOOP, "EXIT"]) + listing("other", ["EXIT"])
    funcs = sass_compare.functions(text)
    assert set(funcs) == {KERNEL, "other"}
    assert funcs[KERNEL][0] == "MOV R1, c[0x0][0x28]" and funcs[KERNEL][-1] == "EXIT"
    assert sass_compare.block_loop(funcs[KERNEL]) == LOOP


def test_same_build_compares_equal():
    f = sass_compare.functions(listing(KERNEL, ["S2R R0, SR_TID.X", *LOOP, "EXIT"]))
    (row,) = sass_compare.compare(f, f, "verify_main_kernel")
    assert row["loop_text_same"] and row["loop_shape_same"] and row["loop_opcode_ratio"] == 1.0


def test_renamed_registers_are_the_same_shape_not_the_same_text():
    renamed = [ins.replace("R56", "R58").replace("R141", "R139") for ins in LOOP]
    a = sass_compare.functions(listing(KERNEL, LOOP))
    b = sass_compare.functions(listing(KERNEL, renamed))
    (row,) = sass_compare.compare(a, b, "verify_main_kernel")
    assert not row["loop_text_same"] and row["loop_shape_same"]


def test_reordered_loop_differs_in_shape_and_opcodes():
    reordered = [LOOP[0], LOOP[2], LOOP[1], LOOP[3]]
    a = sass_compare.functions(listing(KERNEL, LOOP))
    b = sass_compare.functions(listing(KERNEL, ["NOP", *reordered]))
    (row,) = sass_compare.compare(a, b, "verify_main_kernel")
    assert row["instrs"] == (4, 5) and row["loop"] == (4, 4)
    assert not row["loop_shape_same"] and row["loop_opcode_ratio"] < 1.0


def test_only_kernels_matching_the_key_and_present_in_both():
    a = sass_compare.functions(listing(KERNEL, LOOP) + listing("verify_combine_kernel", ["EXIT"]))
    b = sass_compare.functions(listing(KERNEL, LOOP))
    assert [r["kernel"] for r in sass_compare.compare(a, b, "verify")] == [KERNEL]
    assert sass_compare.compare(a, b, "no_such_kernel") == []
