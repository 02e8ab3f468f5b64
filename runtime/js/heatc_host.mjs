// A minimal host for heatc modules in Node.js (or any JS engine with WebAssembly):
// proves a module runs the same outside wasmtime. ABI: docs/abi.md; its offsets and codes come
// from ./abi.mjs, generated from runtime/heatc_runtime/abi.py.
//
//   node runtime/js/heatc_host.mjs BUILD_DIR < inputs.json > reports.jsonl
//
// inputs.json is a JSON array of strings (UTF-8 documents) or {"hex": "..."} objects;
// each document gets one JSON line shaped like heatc_runtime.Report.to_json():
// {"verdict", "rules", "events", "counters"} (events without "text").
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import v8 from "node:v8";
import * as ABI from "./abi.mjs";

// Modules use relaxed SIMD's i8x16.relaxed_swizzle (ABI 1.1; docs/abi.md): on by default from
// Node.js 22, behind this flag in Node.js 20 (where it must be set before the first compile).
if (/^v(1\d|20|21)\./.test(process.version)) v8.setFlagsFromString("--experimental-wasm-relaxed-simd");

const VERDICTS = ABI.VERDICT_NAMES;

export async function load(dir) {
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, "manifest.json"), "utf8"));
  const wasm = fs.readFileSync(path.join(dir, manifest.wasm.file));
  const digest = crypto.createHash("sha256").update(wasm).digest("hex");
  if (digest !== manifest.wasm.sha256) throw new Error(`${dir}: checksum mismatch`);
  const { instance } = await WebAssembly.instantiate(wasm, {});
  const x = instance.exports;
  if (x.abi_major.value !== ABI.ABI_MAJOR || x.abi_minor.value > ABI.ABI_MINOR) {
    throw new Error(`${dir}: ABI ${x.abi_major.value}.${x.abi_minor.value} not supported`);
  }
  const control = x.control.value;
  const eventSize = x.event_size.value, snapSize = x.snapshot_size.value, stateSize = x.state_size.value;
  let top = x.heap_base.value;
  const alloc = (n) => {
    const start = Math.ceil(top / 16) * 16;
    top = start + n;
    const need = top - x.memory.buffer.byteLength;
    if (need > 0) x.memory.grow(Math.ceil(need / 65536));
    return start;
  };
  const evCap = Math.max(4096, 4 * 65 * x.lexeme_events.value), snapCap = 1024;
  const evPtr = alloc(evCap * eventSize), snapPtr = alloc(snapCap * snapSize), state = alloc(stateSize);
  const ctl = () => new DataView(x.memory.buffer, control, ABI.CTL_SIZE);
  const setCtl = (offset, v) => ctl().setUint32(offset, v, true);
  const getCtl = (offset) => ctl().getUint32(offset, true);
  setCtl(ABI.CTL_EV_PTR, evPtr); setCtl(ABI.CTL_EV_CAP, evCap);
  setCtl(ABI.CTL_SNAP_PTR, snapPtr); setCtl(ABI.CTL_SNAP_CAP, snapCap);
  const flagsOffset = manifest.layout.flags_offset;
  const value = (kind, v) => (kind === "class" ? manifest.classes[v] : v);

  function drain(events, snaps) {
    const view = new DataView(x.memory.buffer);
    const nEv = getCtl(ABI.CTL_EV_COUNT), nSnap = getCtl(ABI.CTL_SNAP_COUNT);
    const u64 = (at) => Number(view.getBigUint64(at, true));
    for (let i = 0; i < nEv; i++) {
      const e = evPtr + i * eventSize;
      const kind = view.getUint8(e + ABI.EV_KIND), id = view.getUint32(e + ABI.EV_INDEX, true);
      const start = u64(e + ABI.EV_START), end = u64(e + ABI.EV_END);
      if (kind === ABI.EVENT_ANCHOR) { events.push({ kind: "anchor", anchor: manifest.anchor_groups[id], start, end }); continue; }
      const rule = manifest.rules[id];
      const captures = {};
      rule.captures.forEach((c, j) => { captures[c.name] = value(c.kind, view.getFloat64(e + ABI.EV_CAPTURES + 8 * j, true)); });
      const ev = { kind: "match", rule: rule.name, verdict: VERDICTS[view.getUint8(e + ABI.EV_VERDICT)], start, end, captures };
      const failed = view.getInt32(e + ABI.EV_FAILED, true);
      if (failed >= 0) ev.failed = rule.requirements[failed];
      const conflict = view.getInt32(e + ABI.EV_CONFLICT, true);
      if (conflict >= 0) {
        const ch = manifest.channels[conflict];
        ev.conflict = { channel: ch.name, value: value(ch.kind, view.getFloat64(e + ABI.EV_CONFLICT_VALUE, true)),
          start: u64(e + ABI.EV_CONFLICT_START), end: u64(e + ABI.EV_CONFLICT_END) };
      }
      events.push(ev);
    }
    for (let i = 0; i < nSnap; i++) {
      const s = snapPtr + i * snapSize;
      const verdicts = {};
      manifest.rules.forEach((r, j) => { verdicts[r.name] = VERDICTS[view.getUint8(s + ABI.SNAP_VERDICTS + j)]; });
      const counters = {};
      ABI.SNAPSHOT_COUNTERS.forEach((name) => { counters[name] = u64(s + ABI[`SNAP_${name.toUpperCase()}`]); });
      snaps.push({ verdicts, counters });
    }
    setCtl(ABI.CTL_EV_COUNT, 0); setCtl(ABI.CTL_SNAP_COUNT, 0);
  }

  let inputPtr = 0, inputCap = 0;
  function scan(bytes) {
    if (bytes.length > inputCap) { inputCap = Math.max(bytes.length, 2 * inputCap, 4096); inputPtr = alloc(inputCap); }
    new Uint8Array(x.memory.buffer, inputPtr, bytes.length).set(bytes);
    const events = [], snaps = [];
    let done = x.scan(state, 0, inputPtr, bytes.length);
    drain(events, snaps);
    while (done < bytes.length) { done += x.feed(state, 0, inputPtr + done, bytes.length - done, 1); drain(events, snaps); }
    while (!(new Uint8Array(x.memory.buffer)[state + flagsOffset] & ABI.STATE_FINISHED)) { x.finish(state, 0); drain(events, snaps); }
    const last = snaps[snaps.length - 1];
    const worst = Object.values(last.verdicts).reduce((w, v) => (VERDICTS.indexOf(v) > VERDICTS.indexOf(w) ? v : w), "CONFIRMED");
    return { verdict: worst, rules: last.verdicts, events, counters: last.counters };
  }
  return { manifest, scan };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const host = await load(process.argv[2]);
  const inputs = JSON.parse(fs.readFileSync(0, "utf8"));
  for (const input of inputs) {
    const bytes = typeof input === "string" ? Buffer.from(input, "utf8") : Buffer.from(input.hex, "hex");
    process.stdout.write(JSON.stringify(host.scan(bytes)) + "\n");
  }
}
