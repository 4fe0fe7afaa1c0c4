"""The running wing: from a recipe to finished runs and their records.

A recipe (`recipe`, checked by `recipe_checks`, its budgets by `budgets`) expands into run specs
(`runspec`, `grid`); each run builds its data, loaders and model (`data`, `resident`, `loaders`,
`text_loaders`, `models`, `airbench`, `optimizer`, `lookahead`), trains with the cadence `Trainer`
while `timing` and `flops` measure it (`run`, `runners`), and is logged to MLflow (`tracking`), from
where `bridge` writes it as a run record (`cadence_harness.records`). `preflight` refuses what cannot
run before anything starts; `estimate` and `reference` price a grid from its records.

Nothing here is imported by the reading wing (`cadence_harness.reading`): the two meet only at the
run records.
"""
