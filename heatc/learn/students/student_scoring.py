"""The student scores a corpus's cells: its pair couplings, in place of the teacher's, for
every value of a candidate cell in the plan's probe sentences, then for the values the
top-up chooses for the cells still short of probed occurrences (`labelling.topup_plan`).

The teacher reads a bounded sample (`plan.teacher_share`) that the student is trained on;
the student, some thousand times cheaper, reads the rest. Its records have the teacher's
format, so aggregation does not know who wrote them; every record is the student's, so the
pooled couplings that scores are percentiles of and the cells' strengths come from one
model (the student's couplings are a little less spread than the teacher's: mixing the two
would rank cells by who probed them).

Public surface: `candidate_values`, `student_evidence`.
"""

from __future__ import annotations

from heatc.learn.config import LearnConfig
from heatc.learn.teaching.labelling import topup_plan
from heatc.learn.teaching.plan import Plan, plan_lexicon
from heatc.learn.text.evidence import occurrences
from heatc.learn.text.lexemes import lex_sentence
from heatc.learn.work import Progress, quiet


def candidate_values(program, groups: dict[str, str], wanted: set, text: str) -> list[int]:
    """The value lexemes of the sentence that are occurrences of a candidate cell."""
    return [o.value for o in occurrences(lex_sentence(program, text), groups) if any(k in wanted for k in o.keys)]


def student_evidence(
    config: LearnConfig, plan_: Plan, model, tokenizer, documents, progress: Progress = quiet
) -> list[dict]:
    """Probe records written by the student (the top-up's marked `topup`, as the teacher's)."""
    from heatc.learn.students.pair_student import student_records

    program = plan_lexicon(plan_).program()
    groups = plan_lexicon(plan_).groups()
    wanted = set(plan_.candidates)
    items = [(s, vs) for s in plan_.probe_cells if (vs := candidate_values(program, groups, wanted, s))]
    progress("student scores", 0, 2)
    records = student_records(model, tokenizer, program, items)
    progress("student scores", 1, 2)
    more = topup_plan(config, plan_, records, documents)
    records += [{**r, "topup": True} for r in student_records(model, tokenizer, program, [tuple(x) for x in more])]
    progress("student scores", 2, 2)
    return records
