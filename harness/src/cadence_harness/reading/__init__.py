"""The reading wing: from run records to tables, plots, verdicts and method cards.

It reads `cadence_harness.records` only: `summaries` groups the records into arms and sections,
`stats` and `tradeoff` compute intervals and accuracy-against-cost curves, `combination_search`
searches method combinations (with what the methods declared in their runs: `recorded_effects`), `tables`
and `plots` draw them, `claims` judges method cards' claims, `study` selects a study's records by the study
they carry, and `report` and `cards` write the results. It never imports the running wing
(`cadence_harness.running`), MLflow, a recipe loader, a method package or the core's registry of installed
methods, so a report is the same on every machine that has the records.
"""
