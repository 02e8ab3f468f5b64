"""Make the inputs and expected outputs of cuda_bridge/device_check.py, here, with the
reference interpreter (the GPU machine has torch and cuda-python, not the compiler's
dependencies): `python cuda_bridge/device_data.py [-o cuda_bridge/.device] [--generated N]`.

Writes, under the output directory (git-ignored; the device run carries it):
  programs.zpkl  the module manifest and rules.hct of every program below (zlib, pickle:
                 {id: (manifest, rules.hct bytes)}; bench/programs.zpkl likewise)
  cases.pkl      per program: a token vocabulary; a batch of token streams with the
                 reference's snapshots after every step; documents with the reference's
                 scan (events, final verdicts and counters); guard probes (a prefix, candidate
                 tokens, flush or not) with the reference's verdict per candidate.
                 Programs: the conformance corpus (each case: its chunkings as the batch) and
                 `--generated` rule sets from tests/support/strategies.py (seeded, the generators the
                 WASM and native backends are held to).
  bench/         examples/medical.heat, heatmaps/medical.yaml and a generated 400-rule heatmap with a token table
                 and 65,536 token ids of text for the timings; the default model's token table
                 (model.vocab.pkl) and the same text in its tokens (model.ids.npy).
  gen10000/      a generated 10,000-rule heatmap (bench/build_time.py's generator) built with a
                 tier plan that uses all three tiers (manifest.json, rules.hct, tokens.bin), and
                 expected.pkl: the reference's scans of texts that reach rules in every tier.
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "bench")]

import numpy as np  # noqa: E402
from build_time import WORDS  # noqa: E402
from build_time import heatmap as generated_heatmap  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.conformance_harness import chunkings as case_chunkings  # noqa: E402
from support.conformance_harness import load_cases  # noqa: E402
from support.strategies import chunkings, rule_sets, texts  # noqa: E402

from heatc.heatmap.build import build, compile_heatmap  # noqa: E402
from heatc.lang.compiler import compile_file, compile_source  # noqa: E402
from heatc.semantics.reference import Machine  # noqa: E402
from heatc.wasm import compile_wasm  # noqa: E402
from heatc.wasm.hct import hct_bytes  # noqa: E402
from heatc.wasm.pack import pack  # noqa: E402

GEN10K_TIERS = "tiers: {l2_bytes: 600000, device_bytes: 600000}\n"  # ~3,400 rules a tier


def plain(s) -> tuple:
    """A snapshot as plain, comparable data (device_check.py makes the same of its own)."""
    return (list(s.events), {k: v.value for k, v in s.verdicts.items()}, dict(s.counters), s.final)


def write_program(out: Path, pid: str, program) -> None:
    packed = pack(program)
    module = compile_wasm(program, packed)
    (out / "programs").mkdir(parents=True, exist_ok=True)
    (out / "programs" / f"{pid}.json").write_text(json.dumps(module.manifest))
    (out / "programs" / f"{pid}.hct").write_bytes(hct_bytes(program, packed, (0, 0)))


def pack_programs(out: Path) -> None:
    """programs/ → programs.zpkl (the files compress 15-fold: a device run carries less)."""
    d = out / "programs"
    programs = {f.stem: (json.loads(f.read_text()), (d / f"{f.stem}.hct").read_bytes()) for f in d.glob("*.json")}
    (out / "programs.zpkl").write_bytes(zlib.compress(pickle.dumps(programs), 6))
    shutil.rmtree(d)


def stream_case(program, pieces: list[list[bytes]]) -> dict:
    vocabulary = sorted({p for ps in pieces for p in ps} | {b""})
    ids = {t: i for i, t in enumerate(vocabulary)}
    machines = [Machine(program) for _ in pieces]
    steps = []
    for k in range(max(len(p) for p in pieces)):
        row = {}
        for i, (m, ps) in enumerate(zip(machines, pieces, strict=True)):
            if k < len(ps):
                snaps = [plain(s) for s in m.feed(ps[k])]
                if snaps:
                    row[i] = snaps
        steps.append(row)
    return {"vocabulary": vocabulary, "streams": [[ids[t] for t in ps] for ps in pieces], "steps": steps}


def scans(program, docs: list[bytes]) -> list[tuple]:
    out = []
    for d in docs:
        m = Machine(program)
        snaps = m.feed(d) + m.finish()
        out.append((d, [e for s in snaps for e in s.events], plain(snaps[-1])[1:]))
    return out


def guard_probes(program, prefix: bytes, cands: list[bytes]) -> list[dict]:
    out = []
    for flush in (False, True):
        m = Machine(program)
        m.feed(prefix)
        base = m.counters()["rejections"]
        rejected = []
        for c in cands:
            f = m.fork()
            f.feed(c)
            after = (f.finish()[-1].counters if flush else f.counters())["rejections"]
            rejected.append(after > base)
        out.append({"prefix": prefix, "cands": cands, "flush": flush, "rejected": rejected})
    return out


def conformance(out: Path, cases: list, limit: int | None = None) -> None:
    for n, case in enumerate(load_cases()[:limit]):
        if reason := case.skipped_by("op"):  # (the corpus's own skip for the torch ops' kernel)
            print(reason)
            continue
        program = compile_source(case.rules, case.file)
        pid = f"conf{n:04d}"
        write_program(out, pid, program)
        entry = {"program": pid, "name": case.id, **stream_case(program, [c for _, c in case_chunkings(case)])}
        entry["scans"] = scans(program, [case.input])
        entry["guard"] = []
        cases.append(entry)


def generated(out: Path, cases: list, n: int) -> None:
    count = [0]

    @settings(max_examples=n, database=None, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(rule_sets(), st.data())
    def one(g, data):
        program = compile_source(g.source, "generated.heat")
        pid = f"gen{count[0]:04d}"
        count[0] += 1
        streams = data.draw(st.lists(texts(g.pieces), min_size=1, max_size=8))
        pieces = [data.draw(chunkings(s)) for s in streams]
        entry = {"program": pid, "name": f"generated {pid}", **stream_case(program, pieces)}
        entry["scans"] = scans(program, data.draw(st.lists(texts(g.pieces), min_size=1, max_size=6)))
        cands = sorted({p.encode() for p in g.pieces[:12]} | {b" ", b".", b"5000"})
        entry["guard"] = guard_probes(program, data.draw(texts(g.pieces)), cands)
        write_program(out, pid, program)
        cases.append(entry)

    one()


def bench_data(out: Path) -> None:
    from run import medical_text, tokenizer

    b = out / "bench"
    b.mkdir(parents=True, exist_ok=True)
    text = medical_text(1_000_000)
    vocab, encode = tokenizer(text)
    ids = np.array(encode(text), dtype=np.int64)[: 1 << 16]
    write_program(b, "medical", compile_file(REPO / "examples" / "medical.heat"))
    (b / "medical.vocab.pkl").write_bytes(pickle.dumps(vocab))
    np.save(b / "medical.ids.npy", ids)
    # the shipped learned heatmap, timed on the same tokens (device_check.TOKENS_OF)
    program, _, _ = compile_heatmap(REPO / "heatmaps" / "medical.yaml")
    write_program(b, "medlearned", program)
    # a generated 400-rule heatmap (keywords, numbers, units), byte tokens over its own text
    path = b / "gen400.yaml"
    path.write_text(generated_heatmap(400))
    program, _, _ = compile_heatmap(path)
    write_program(b, "gen400", program)
    words = [f"{WORDS[k % len(WORDS)]}{WORDS[(k // len(WORDS)) % len(WORDS)]}{k}" for k in range(400)]
    text = " ".join(f"the {w} was {k * 37 % 160} u{k % 20}x and more plain words here." for k, w in enumerate(words))
    (b / "gen400.vocab.pkl").write_bytes(pickle.dumps([bytes([i]) for i in range(256)]))
    np.save(b / "gen400.ids.npy", np.frombuffer(text.encode() * 4, dtype=np.uint8).astype(np.int64)[: 1 << 16])
    path.unlink()
    # the default model's token table (SmolLM2's, 49,152 tokens) and the same text in its
    # tokens: the engines' GPU path (device_engine.py)
    from transformers import AutoTokenizer

    from heatc_runtime.engines.models import default_model_dir
    from heatc_runtime.engines.tokens import table_for_tokenizer

    model_tokenizer = AutoTokenizer.from_pretrained(str(default_model_dir()))
    (b / "model.vocab.pkl").write_bytes(pickle.dumps(list(table_for_tokenizer(model_tokenizer).tokens)))
    chunk = medical_text(400_000).decode("utf-8", "ignore")
    np.save(b / "model.ids.npy", np.array(model_tokenizer(chunk)["input_ids"], dtype=np.int64)[: 1 << 16])
    pack_programs(b)


def gen10000(out: Path) -> None:
    d = out / "gen10000"
    tmp = out / ".gen10000-build"
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "gen10000.yaml"
    path.write_text(generated_heatmap(10000) + GEN10K_TIERS)
    result = build(path, tmp / "out")
    d.mkdir(parents=True, exist_ok=True)
    for name in ("manifest.json", "rules.hct", "tokens.bin"):
        shutil.copy2(result.directory / name, d / name)
    tiers = {r["name"]: r["tier"] for r in result.manifest["build"]["rules"]}
    # one text per tier: every keyword of the tier's rules with a value out of every range
    docs = []
    for tier in ("l2", "device", "host"):
        ks = [int(n.rsplit("_", 2)[0].removeprefix("kw")) for n, t in tiers.items() if t == tier][:300]
        docs.append(
            " ".join(
                f"{WORDS[k % len(WORDS)]}{WORDS[(k // len(WORDS)) % len(WORDS)]}{k} {5000 if k % 3 else 50} u{k % 20}x."
                for k in ks
            ).encode()
        )
    expected = {"scans": scans(result.program, docs), "tiers": tiers}
    (d / "expected.pkl").write_bytes(pickle.dumps(expected))
    shutil.rmtree(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=REPO / "cuda_bridge" / ".device")
    parser.add_argument("--generated", type=int, default=300, help="generated rule sets (default 300)")
    parser.add_argument("--conformance", type=int, default=None, help="only the first N corpus cases")
    parser.add_argument("--skip-10k", action="store_true", help="leave out the 10,000-rule heatmap (slow to build)")
    args = parser.parse_args()
    out = args.out
    t = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "programs", ignore_errors=True)
    cases: list = []
    conformance(out, cases, args.conformance)
    generated(out, cases, args.generated)
    (out / "cases.pkl").write_bytes(pickle.dumps(cases))
    pack_programs(out)
    n_seq = sum(len(c["streams"]) + len(c["scans"]) + len(c["guard"]) for c in cases)
    print(f"{len(cases)} programs, {n_seq} cases (streams, documents, guard probes) in {time.perf_counter() - t:.0f} s")
    bench_data(out)
    if not args.skip_10k:
        gen10000(out)
    print(f"wrote {out} in {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
