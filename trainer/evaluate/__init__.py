"""Evaluation of the base and the tuned model on the held-out split.

Each eval row is scored on its last assistant turn (the conversation before it is the
prompt), by what that turn is:
- a tool call: function-calling accuracy, exact match. The model's first tool call must
  have the expected function name and JSON-equal arguments (key order and whitespace do
  not matter). Only these rows count (`fc_rows`).
- text: text match, the model's answer equal to the expected text after normalisation
  (case, punctuation, whitespace); a tool call where text was expected is wrong. Only
  these rows count (`text_rows`), and their eval loss is reported on its own.
So a model that never calls a tool scores 0% function-calling accuracy, whatever the mix.
Rows longer than max_seq_len (prompt and expected answer) are skipped before anything is
generated, as training skips them, and counted (`skipped_long_rows`): the row counts and
accuracies are over the rows scored.

The package: `scoring` (answers against rows), `losses` (eval losses, local or served),
`generation` (HF generate), `served` (through vLLM's server), `paired` (the rows tuning lost and
won, McNemar's test), `gate` (promotion), `run` (the evaluation of base and tuned that the evaluate
step calls). The functions tests and benchmarks
replace (generate, load, eval_loss, served_losses, ask, served_predictions, score) are called
through their module (`generation.generate`): replace them there, on the module that defines
them; the names this package re-exports are for calling, not for replacing.
"""

from trainer.evaluate.gate import promotion  # noqa: F401
from trainer.evaluate.generation import context_length, fitting_rows, generate, load  # noqa: F401
from trainer.evaluate.losses import CONCURRENCY, eval_loss, mean_loss, served_losses  # noqa: F401
from trainer.evaluate.run import (MIN_RELIABLE_ROWS, evaluate, logged_metrics, score, score_base,  # noqa: F401
                                  warnings_for)
from trainer.evaluate.scoring import (is_correct, normalize_text, row_counts, score_outputs,  # noqa: F401
                                      score_predictions, text_matches)
from trainer.evaluate.served import ENGINES, choose_engine, server_plans  # noqa: F401
