"""Validation of pipeline parameters before any expensive work starts.

One set of rules for every way a run starts: `pipelines.run_local`, `pipelines.submit` (and its
--dry-run), and the `validate-params` step that opens both pipelines, so a run started from
the KFP UI is checked exactly as one started from the command line. Bad input fails in a
second with one message listing every problem and its fix, not minutes into a run.

Order of checks: types first (a string "16", null, true where a number belongs, NaN or
infinity), then values (ranges, sources, the model's context), then the Kubernetes API
server's rules for cluster settings (trainer.k8s.rules through ClusterSpec). A value of the
wrong type is reported once and replaced by its default for the later checks, so they can
still report every other problem in the same round.

The package: `values` (each value alone), `pipeline` (the finetune pipeline's parameters together),
`cluster` (the API server's rules), `sweep` (its trials, then the finetune checks on each).
"""

from trainer.validate.cluster import on_cluster_problems, run_namespace_problems  # noqa: F401
from trainer.validate.pipeline import pipeline_problems, pipeline_warnings, registry_problems  # noqa: F401
from trainer.validate.sweep import SWEEP_ONLY, TRIAL_KEYS, sweep_problems  # noqa: F401
from trainer.validate.values import DEFAULTS, default, type_problems, value_problem  # noqa: F401
