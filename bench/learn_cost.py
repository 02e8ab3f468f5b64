"""What learning and fine-tuning cost on this machine. `python bench/learn_cost.py`

Runs the two commands a user runs, with their defaults and from scratch (`--fresh`), and
reports wall-clock and CPU time of each:

- `heatc learn` on the first 120 MTSamples General Medicine notes (`--notes N` to change),
  and what the heatmap it learns does on the other General Medicine notes: false alarms per
  sentence a rule checks, impossible values caught (as `bench/learn_usefulness.py` counts
  them), and the false-alarm budget `heatc learn` reports;
- `heatc finetune heatmaps/medical.yaml` on the four FDA drug labels in ../shared/data.

Target: each within 3 minutes of wall-clock time on a 2-core machine. The load average at
each start is printed beside it: a timing taken on a busy machine says little. The student
fidelity each run records (pair Spearman, pair AUC, token AUC on its held-out sentences) is
printed too, so that a faster run shows what it costs in fidelity. The work folders are in
bench/.work/cost/.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learn_common import DATA, REPO, machine

WORK = REPO / "bench" / ".work" / "cost"
GENERAL_MEDICINE = DATA / "medical/text/mtsamples_general_medicine_260notes_linebroken.tgz"
LABELS = sorted((DATA / "medical/pdf").glob("fda_*.pdf"))
HEATC = [str(Path(sys.executable).parent / "heatc")]  # the console script installed beside this Python
TARGET_S = 180.0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(label: str, argv: list[str]) -> dict:
    """Run one heatc command; its wall and CPU seconds and the load average at its start."""
    load = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if done.returncode != 0:
        sys.exit(f"{label} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {"label": label, "wall_s": wall, "cpu_s": cpu, "load": load, "stdout": done.stdout}


def fidelity(heatmap: Path) -> str:
    """The student fidelity a heatmap's provenance records (`provenance.metrics`, as both
    `heatc learn` and `heatc finetune` write it)."""
    metrics = yaml.safe_load(heatmap.read_text(encoding="utf-8")).get("provenance", {}).get("metrics", {})
    shown = [f"{k} {metrics[k]:.3f}" for k in ("student_auc", "pair_spearman", "pair_auc") if k in metrics]
    return ", ".join(shown) or "none recorded"


def learned_on_other_notes(heatmap: Path, every, learned: int, stdout: str) -> None:
    """The learned heatmap's budget, as `heatc learn` printed it, and its false alarms and
    catches on the General Medicine notes (`every`) past the first `learned` it read."""
    from learn_usefulness import Scanner, evaluate, unit_contexts

    notes = every[learned:]
    budget = next((line for line in stdout.splitlines() if line.startswith("false-alarm budget")), "")
    # a unit swap counts where the notes never write the new unit after that word
    context = unit_contexts("medical", every)
    r = evaluate("medical", Scanner(heatmap), notes, max_per_kind=400, context=context)
    caught, tried = (sum(x[i] for x in r["impossible"].values()) for i in (0, 1))
    print(f"  {budget}")
    print(
        f"  on the other {len(notes)} General Medicine notes: {r['rules']} rules reject {r['flagged']} of the "
        f"{r['checked']} sentences they check ({r['flagged'] / max(r['checked'], 1):.2%}) and catch {caught} of "
        f"{tried} impossible values (" + ", ".join(f"{k} {c}/{t}" for k, (c, t) in r["impossible"].items()) + ")"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=120, help="General Medicine notes heatc learn reads")
    ap.add_argument("--only", choices=("learn", "finetune"), help="run one of the two")
    args = ap.parse_args()
    from heatc.learn.text.corpus import read_corpus

    print(f"machine: {machine()}")
    WORK.mkdir(parents=True, exist_ok=True)
    rows = []
    if args.only != "finetune":
        every = read_corpus([GENERAL_MEDICINE])
        notes = every[: args.notes]
        corpus = WORK / f"general_medicine_{args.notes}.jsonl"
        corpus.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in notes), encoding="utf-8")
        out = WORK / "learned.yaml"
        r = timed(f"heatc learn, {len(notes)} notes", [*HEATC, "learn", "-c", str(corpus), "-o", str(out), "--fresh"])
        rows.append((r, fidelity(out)))
        learned_on_other_notes(out, every, len(notes), r["stdout"])
    if args.only != "learn":
        out = WORK / "drug_labels.yaml"
        pdfs = [a for p in LABELS for a in ("--pdf", str(p))]
        argv = [*HEATC, "finetune", str(REPO / "heatmaps/medical.yaml"), *pdfs, "-o", str(out), "--fresh"]
        r = timed(f"heatc finetune, {len(LABELS)} FDA labels", argv)
        rows.append((r, fidelity(out)))
    print(f"\n{'command':<32} {'wall s':>7} {'CPU s':>7} {'load at start':>14}  within 3 min   student fidelity")
    for r, fid in rows:
        ok = "yes" if r["wall_s"] <= TARGET_S else "NO"
        print(f"{r['label']:<32} {r['wall_s']:>7.0f} {r['cpu_s']:>7.0f} {r['load']:>14.2f}  {ok:<12}  {fid}")


if __name__ == "__main__":
    main()
