"""Which keywords of a shipped heatmap's cells name a measured quantity, by the learner's test
(`heatc.learn.text.quantities`) run on a corpus: `python bench/learn_quantities.py`.

By default: the keywords of `heatmaps/medical.yaml`'s cells, on the 260 MTSamples General
Medicine notes. Prints how many the test keeps, and for each word asked about (`--words`)
whether it is kept and why not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learn_usefulness as lu  # bench/, beside this script

from heatc.learn.heatmaps.aggregate import counted_text
from heatc.learn.text.corpus import read_corpus
from heatc.learn.text.lexemes import Lexicon
from heatc.learn.text.quantities import MIN_VALUES, is_quantity, keyword_profiles, quantity_score

REPO = Path(__file__).resolve().parent.parent
WORDS = "patient hospital motor findings morning pleasant well oriented given last follow glucose hematocrit pulse"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heatmap", type=Path, default=REPO / "heatmaps" / "medical.yaml")
    ap.add_argument("--corpus", type=Path, default=lu.GENERAL_MEDICINE)
    ap.add_argument("--words", default=WORDS, help="the words to report on, space-separated")
    args = ap.parse_args()
    hm = yaml.safe_load(args.heatmap.read_text(encoding="utf-8"))
    cats = hm["categories"]
    used = {c["pair"][0] for c in hm["cells"] if cats.get(c["pair"][0], {}).get("kind") == "keyword"}
    seed = Lexicon()
    known = {lit.lower() for c in seed.categories for lit in c.literals}
    phrases = sorted({lit for k in used for lit in cats[k]["literals"] if lit.lower() not in known})
    lexicon = seed.with_keywords(phrases)
    keywords = [c.name for c in lexicon.categories if c.group == "keyword"]
    name_of = {c.literals[0].lower(): c.name for c in lexicon.categories if c.group == "keyword"}
    texts = [counted_text(d.text) for d in read_corpus([args.corpus])]
    profiles = keyword_profiles(lexicon, keywords, texts)
    kept = [k for k in keywords if is_quantity(profiles[k])[0]]
    print(f"{len(keywords)} keywords of {args.heatmap.name}'s cells on {len(texts)} documents: {len(kept)} kept")
    for word in args.words.split():
        k = name_of.get(word)
        if k is None:
            print(f"  {word:<11} no keyword of the heatmap")
            continue
        p = profiles[k]
        ok, why = is_quantity(p)
        verdict = "kept" if ok else "out "
        note = why or (f"binds {p.n} values (too few to judge or to make a cell)" if p.n < MIN_VALUES else "")
        print(f"  {word:<11} {verdict}  score {quantity_score(p):.2f}  {note}")


if __name__ == "__main__":
    main()
