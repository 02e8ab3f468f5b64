"""The batch API: sequences decoded token by token (docs/layout.md).

Modules: `batch` (`Batch`: many sequences in one state array, one call per step), `states`
(its state records: reset, fork, save, restore), `lookahead`
(`Lookahead`: candidate tokens tried on copies of the sequences), `drafts` (`Batch.verify`:
draft tokens of speculative decoding), `counts` (`StepCounts`: what a batch did, for
metrics), `protocol` (`CheckerProtocol`: what these need of a checker, whichever backend).

Public surface: the modules above.
"""
