"""The pipelines as KFP DAGs: finetune and sweep, and the task wiring they share (tasks). Only wiring: no I/O,
cluster look-ups or random names at compile time. The command-line tools that run and submit them sit one level up."""
