"""The corpus read as the learner reads it: documents and sentences (`corpus`), lexemes and
the seed lexicon (`lexemes`, `model_names`), keywords and their shadow phrases (`discovery`,
`shadows`), which keywords name a quantity (`quantities`), and the candidate cells with the
values they capture (`evidence`). Imports nothing else of heatc.learn.
"""
