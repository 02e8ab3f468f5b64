"""The module ABI is defined once, in heatc_runtime.abi, and every reader agrees with it: the
kernel template (named constants only, and what it renders), the packer, the state layout,
the record decoder, the Node.js host (through the generated runtime/js/abi.mjs) and C/C++,
the native and CUDA core included (through the generated cuda_bridge/include/heatc_abi.h)."""

import json
import re
import shutil
import struct
import subprocess

import pytest
from support import REPO, compile_cached

from heatc import ir
from heatc.wasm import compile_wasm
from heatc.wasm.hct import hct_bytes
from heatc.wasm.pack import pack
from heatc_runtime import abi, abi_export
from heatc_runtime.reports.records import RecordDecoder
from heatc_runtime.reports.report import Verdict

TEMPLATE = REPO / "heatc" / "wasm" / "templates" / "kernel.wat.j2"
JS_ABI = REPO / "runtime" / "js" / "abi.mjs"
C_ABI = REPO / "cuda_bridge" / "include" / "heatc_abi.h"

# Every construct the kernel has a switch for: anchors with a domain, a gate, channels, a
# late-starting rule, requirements of every kind, a one-element rule, a window.
RULES = """ruleset abi
options { chinese_numbers }
class stop punct = "."
class units unit = "mg/dL", "bpm"
class kw keyword = "glucose", "rate"
anchor dx domain "d1" = "blood sugar"
triggers {
  at stop
  every 3
}
rule late {
  match v:number units
  require v in (0, 600]
}
rule keyed {
  match k:kw ..3 v:number units
  require v < 400
  consistent v per k
}
rule gated {
  match kw ..2 v:number
  when dx
  lock ch = v
}
rule one {
  match "rate"
}
"""


def _program():
    return compile_cached(RULES)


def test_the_generated_readers_are_current():
    assert JS_ABI.read_text(encoding="utf-8") == abi_export.js_module(), "runtime/js/abi.mjs is stale: run `make abi`"
    assert C_ABI.read_text(encoding="utf-8") == abi_export.c_header(), "heatc_abi.h is stale: run `make abi`"


def test_every_constant_is_defined_once_and_records_are_ordered():
    names = abi.constants()  # (raises on a name defined twice)
    assert names["CTL_QUIET"] == 4 * abi.QUIET and names["EV_CAPTURES"] == abi.EVENT.size
    for record in abi.RECORDS:
        offsets = list(record.offsets.values())
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), record.name


def test_the_fixed_regions_do_not_overlap():
    assert abi.CONTROL + abi.CONTROL_BLOCK.size <= abi.SHA_W
    assert abi.SHA_W + 64 * 4 <= abi.TMP_THREAD  # the sha256 message schedule: 64 u32
    # a thread record with the most captures a rule can have (one per element)
    assert abi.TMP_THREAD + abi.THREAD.size + 8 * ir.MAX_ELEMENTS <= abi.SCRATCH


def test_the_ir_takes_its_kernel_codes_from_the_abi():
    for name in ("LEX_SPACE", "LEX_WORD", "LEX_LITERAL0", "FLAG_TRIGGER", "FLAG_ANCHOR_END", "OPS"):
        assert getattr(ir, name) is getattr(abi, name)
    assert [v.value for v in Verdict] == [abi.constants()[f"VERDICT_{v.name}"] for v in Verdict]


# --- the kernel template ------------------------------------------------------------------

# the template's locals that hold the address of an ABI record (control block apart)
RECORD_POINTERS = ("rec", "el", "els", "q", "u", "ch", "ev", "e", "s", "thread", "rs", "slot", "slots")


def test_the_template_spells_no_abi_offset_as_a_number():
    src = TEMPLATE.read_text(encoding="utf-8")
    # control-block words by name, never by number, and the block's address only as ABI.CONTROL
    assert not re.findall(r"offset=\d+ \(i32\.const \{\{ ABI\.CONTROL \}\}\)", src)
    assert not re.findall(r"\((?:i32|i64)\.(?:load|store)\w* \(i32\.const \{\{ ABI\.CONTROL \}\}\)", src)
    assert not re.findall(r"\(i32\.const (?:256|0x100)\)", src)
    assert "C.CONTROL" not in src
    # a field of a record the kernel reads through a pointer: a named offset, never a number
    # (nor the implied 0)
    access = r"\((?:i32|i64|f64|v128)\.(?:load|store)\w* (?:offset=\d+ )?\(local\.get \$(%s)\)"
    bare = re.findall(access % "|".join(RECORD_POINTERS), src)
    assert not bare, f"record fields accessed by a numeric offset through: {sorted(set(bare))}"
    # the comparisons' br_table takes its labels in the ABI's operator order
    labels = re.search(r"\(br_table ((?:\$\w+ )+)\(local\.get \$op\)\)", src).group(1).split()
    assert [abi.constants()[f"OP_{label[1:].upper()}"] for label in labels] == list(range(len(labels)))
    # flag bits by name: a test of a code's flags names the bit
    flags = re.findall(r"T_code_flags[^\n]*?\)\) \(i32\.const (\d+)\)", src)
    assert not flags, f"code flags tested as bare numbers: {flags}"


def test_the_rendered_kernel_agrees_with_the_abi():
    wat = compile_wasm(_program()).wat
    for name in ("abi_major", "abi_minor", "control"):
        value = re.search(rf'\(global \(export "{name}"\) i32 \(i32\.const (-?\d+)\)\)', wat).group(1)
        assert int(value) == {"abi_major": abi.ABI_MAJOR, "abi_minor": abi.ABI_MINOR, "control": abi.CONTROL}[name]
    words = set(abi.CONTROL_BLOCK.offsets.values())
    accesses = re.findall(rf"offset=(\d+) \(i32\.const {abi.CONTROL}\)", wat)
    assert accesses and {int(m) for m in accesses} <= words
    # the block's address appears only in the export and in those accesses
    assert wat.count(f"(i32.const {abi.CONTROL})") == 1 + len(accesses)


# --- the compiler's other readers ---------------------------------------------------------


def test_the_state_layout_has_the_abi_head_and_records():
    program = _program()
    layout = ir.state_layout(program)
    for name, offset in abi.STATE_HEAD.offsets.items():
        assert layout.field(name).offset == offset
    assert layout.field("buf").offset == abi.STATE_HEAD.size
    rule = layout.field("rule[1].rejected").offset
    assert layout.field("rule[1].matches").offset == rule + abi.RULE_STATE.offset("matches")
    slot = layout.field("rule[1].slot[1].active").offset
    assert slot == rule + abi.RULE_STATE.size
    for name in ("gaps", "start"):
        assert layout.field(f"rule[1].slot[1].{name}").offset == slot + abi.THREAD.offset(name)
    assert layout.field("rule[1].slot[1].captures").offset == slot + abi.THREAD.size
    channel = layout.field("channel[0].set").offset
    for name in ("value", "start", "end"):
        assert layout.field(f"channel[0].{name}").offset == channel + abi.CHANNEL_STATE.offset(name)
    entry = layout.field("anchor[0].start").offset
    assert layout.field("anchor[0].len").offset == entry + abi.ANCHOR_ENTRY.offset("len")
    assert layout.field("anchor[0].text").offset == entry + abi.ANCHOR_ENTRY.size


def test_packed_rule_records_have_the_abi_layout():
    program = _program()
    packed = pack(program)
    blob, layout = packed.blob, ir.state_layout(program)
    offsets = struct.unpack_from(f"<{len(program.rules)}I", blob, packed.offsets["rule_off"])
    for r, (rule, at) in enumerate(zip(program.rules, offsets, strict=True)):
        head = dict(zip(abi.RULE.names, abi.RULE.struct.unpack_from(blob, at), strict=True))
        assert (head["n_elements"], head["n_captures"], head["gate"]) == (
            len(rule.elements), len(rule.captures), rule.gate)  # fmt: skip
        assert head["state_off"] == layout.field(f"rule[{r}].rejected").offset
        assert head["slot_size"] == abi.THREAD.size + 8 * len(rule.captures)
        assert head["late"] == int(ir.starts_late(rule))
        for i, e in enumerate(rule.elements):
            el = dict(zip(abi.ELEMENT.names, abi.ELEMENT.struct.unpack_from(blob, at + head["elements"] + i * abi.ELEMENT.size), strict=True))  # fmt: skip
            assert (el["gap"], el["n_accepts"], el["capture"]) == (e.gap, len(e.accepts), e.capture)
            accepts = struct.unpack_from(f"<{len(e.accepts)}I", blob, at + el["accepts"])
            assert list(accepts) == e.accepts
        for i, q in enumerate(rule.requirements):
            req = abi.REQUIREMENT.struct.unpack_from(blob, at + head["requirements"] + i * abi.REQUIREMENT.size)
            assert abi.OPS[req[abi.REQUIREMENT.position("op")]] == q.op
        for i, u in enumerate(rule.channels):
            use = abi.CHANNEL_USE.struct.unpack_from(blob, at + head["channels"] + i * abi.CHANNEL_USE.size)
            assert use[abi.CHANNEL_USE.position("channel")] == u.channel
    assert any(rule.requirements for rule in program.rules) and any(rule.channels for rule in program.rules)


def test_rules_hct_has_the_abi_header():
    program = _program()
    packed = pack(program)
    data = hct_bytes(program, packed, (7, 9))
    head = dict(zip(abi.HCT_HEADER.names, abi.HCT_HEADER.struct.unpack_from(data), strict=True))
    assert head["magic"] == abi.HCT_MAGIC and head["version"] == abi.HCT_VERSION
    assert (head["abi_major"], head["abi_minor"]) == (abi.ABI_MAJOR, abi.ABI_MINOR)
    assert (head["l2_end"], head["device_end"], head["blob_size"]) == (7, 9, len(packed.blob))
    first = abi.HCT_SECTION.struct.unpack_from(data, abi.HCT_HEADER.size)
    assert first[1] == 0 and first[0].rstrip(b"\0").decode() in packed.offsets
    at = abi.HCT_HEADER.size + head["n_sections"] * abi.HCT_SECTION.size
    (n_params,) = struct.unpack_from("<I", data, at)
    names = [abi.HCT_PARAM.struct.unpack_from(data, at + 4 + i * abi.HCT_PARAM.size)[0] for i in range(n_params)]
    assert [n.rstrip(b"\0").decode() for n in names] == list(abi.HCT_VALUES)
    assert data[at + 4 + n_params * abi.HCT_PARAM.size :] == packed.blob


def test_the_record_decoder_reads_the_abi_layouts():
    manifest = {
        "rules": [{"name": "r", "captures": [{"name": "v", "kind": "number"}, {"name": "k", "kind": "class"}],
                   "requirements": ["v < 1", "v > 2"]}],
        "classes": ["c0", "c1"], "channels": [{"name": "ch", "kind": "number"}], "anchor_groups": ["g"],
    }  # fmt: skip
    size = abi.EVENT.size + 16
    decoder = RecordDecoder(manifest, size, abi.SNAPSHOT.size + 8)
    fields = {"seq": 7, "kind": abi.EVENT_MATCH, "verdict": abi.VERDICT_REJECTED, "index": 0, "failed": 1,
              "start": 11, "end": 13, "conflict": 0, "conflict_value": 2.5, "conflict_start": 3, "conflict_end": 5}  # fmt: skip
    record = bytearray(size)
    abi.EVENT.struct.pack_into(record, 0, *(fields.get(name, 0) for name in abi.EVENT.names))
    struct.pack_into("<dd", record, abi.EVENT.size, 42.0, 1.0)
    [(seq, event)] = decoder.events(bytes(record))
    assert seq == 7 and (event.name, event.start, event.end) == ("r", 11, 13)
    assert event.verdict == Verdict.REJECTED and event.failed == "v > 2"
    assert event.captures == (("v", 42.0), ("k", "c1"))
    assert (event.conflict.channel, event.conflict.value, event.conflict.start, event.conflict.end) == ("ch", 2.5, 3, 5)
    abi.EVENT.struct.pack_into(
        record, 0, *({"kind": abi.EVENT_ANCHOR, "start": 1, "end": 2}.get(n, 0) for n in abi.EVENT.names)
    )
    [(_, anchor)] = decoder.events(bytes(record))
    assert (anchor.kind, anchor.name, anchor.start, anchor.end) == ("anchor", "g", 1, 2)
    values = {
        "seq": 3,
        "events": 4,
        "final": 1,
        "bytes": 10,
        "lexemes": 11,
        "tokens": 12,
        "matches": 13,
        "rejections": 14,
    }
    snap = bytearray(decoder.snapshot_size)
    abi.SNAPSHOT.struct.pack_into(snap, 0, *(values.get(name, 0) for name in abi.SNAPSHOT.names))
    snap[abi.SNAPSHOT.size] = abi.VERDICT_PENDING
    [(seq, n_events, snapshot)] = decoder.snapshots(bytes(snap))
    assert (seq, n_events, snapshot.final) == (3, 4, True)
    assert snapshot.counters == {name: values[name] for name in abi.SNAPSHOT_COUNTERS}
    assert snapshot.verdicts["r"] == Verdict.PENDING


# --- the generated readers agree when their languages read them ----------------------------


def _expected_js() -> dict:
    out = dict(abi.constants())
    out |= {"CONTROL_FIELDS": list(abi.CONTROL_FIELDS), "SNAPSHOT_COUNTERS": list(abi.SNAPSHOT_COUNTERS)}
    out |= {"VERDICT_NAMES": list(abi.VERDICT_NAMES), "OPS": list(abi.OPS), "HCT_MAGIC": abi.HCT_MAGIC.decode()}
    return out


@pytest.mark.needs("node")
def test_node_reads_the_abi_module():
    node = shutil.which("node")
    code = f"import * as A from {json.dumps(JS_ABI.as_uri())}; console.log(JSON.stringify({{...A}}));"
    out = subprocess.run([node, "--input-type=module", "-e", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == _expected_js()
    host = (REPO / "runtime" / "js" / "heatc_host.mjs").read_text(encoding="utf-8")
    assert 'from "./abi.mjs"' in host
    numeric = re.findall(r"get(?:Uint|Int|Float|BigUint)\w*\((?:e|s) \+ \d", host)
    assert not numeric, f"the Node.js host reads record fields at numeric offsets: {numeric}"


@pytest.mark.needs("cc")
@pytest.mark.parametrize("compiler", ["gcc", "g++"])
def test_the_c_header_compiles_and_agrees(tmp_path, compiler):
    exe = shutil.which(compiler)
    lines = [f'#include "{C_ABI}"', "#include <stdio.h>", "int main(void) {"]
    numbers = abi.constants() | abi_export.core_constants() | abi.HASH_CONSTANTS
    lines += [f'  printf("{name} %llu\\n", (unsigned long long)HEATC_{name});' for name in numbers]
    lines += [f'  printf("P_{name.upper()} %d\\n", (int)HEATC_P_{name.upper()});' for name in abi.HCT_PARAMS]
    lines += ['  printf("HCT_MAGIC %s\\n", HEATC_HCT_MAGIC);', "  return 0;", "}"]
    src = tmp_path / ("main.c" if compiler == "gcc" else "main.cpp")
    src.write_text("\n".join(lines) + "\n")
    std = "-std=c11" if compiler == "gcc" else "-std=c++11"
    subprocess.run([exe, std, "-Wall", "-Wextra", "-Werror", "-pedantic", str(src), "-o", str(tmp_path / "main")],
                   check=True, capture_output=True, text=True)  # fmt: skip
    out = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, check=True).stdout
    got = dict(line.split(" ", 1) for line in out.splitlines())
    assert got.pop("HCT_MAGIC") == abi.HCT_MAGIC.decode()
    want = {name: value % (1 << 64) for name, value in numbers.items()}  # (NO_INDEX, -1, printed unsigned)
    want |= {f"P_{name.upper()}": i for i, name in enumerate(abi.HCT_PARAMS)}
    assert {k: int(v) for k, v in got.items()} == want


def test_the_core_includes_the_one_generated_header():
    """The C++ core reads every ABI constant from heatc_abi.h, the one generated header: no
    other header is generated, and no number of the ABI is defined in the core by hand."""
    bridge = REPO / "cuda_bridge"
    generated = [p.name for p in sorted(bridge.glob("*/*.h")) if "do not edit" in p.read_text(encoding="utf-8")]
    assert generated == ["heatc_abi.h"]
    assert '#include "heatc_abi.h"' in (bridge / "include" / "heatc_core.h").read_text(encoding="utf-8")
    names = set(abi.constants()) | set(abi_export.core_constants()) | set(abi.HASH_CONSTANTS)
    for source in [*bridge.glob("*/*.h"), *bridge.glob("*/*.c*")]:
        if source.name == "heatc_abi.h":
            continue
        defined = set(re.findall(r"#define HEATC_(\w+)", source.read_text(encoding="utf-8")))
        assert not defined & names, f"{source.name} defines ABI constants by hand: {sorted(defined & names)}"
