"""Evaluation of the base and the tuned model on the held-out split.

Every trained assistant turn of an eval row is asked, with the gold conversation before it as
the prompt (tool results included; trainer.chat.turns.turn_rows), as BFCL's multi-turn scoring
asks each turn. A glaive or Hermes row (call, tool result, text answer) is scored on its call and
on its answer. Each turn is scored by what it is:
- a tool call: function-calling accuracy, exact match (the model's calls with the expected
  names and JSON-equal arguments), and the BFCL-style AST check by category (simple, multiple,
  parallel by what it calls; trainer.chat.fc_check). These turns count in `fc_rows`.
- text: text match, the answer equal to the expected text after normalisation (case,
  punctuation, whitespace); a tool call where text was expected is wrong. In the AST check, text
  answering a tool result (`multi_turn`) must overlap the expected answer (ROUGE-L F1 >= 0.5), so
  noise fails, and text where tools are offered (`irrelevance`) must make no call. These turns
  count in `text_rows`.
So a model that never calls a tool scores 0% function-calling accuracy, whatever the mix.
The eval losses are over the rows (each row's encoding once). Rows longer than max_seq_len
(prompt and expected answer) are skipped before anything is generated, as training skips them,
and counted (`skipped_long_rows`); `eval_max_rows` counts rows, not turns.

The package: two contracts in `base` -- a `Suite` (what to ask, how to score it: `heldout`, `bfcl`) and an
`Engine` (what asks: `generation.HfEngine`, HF generate; `served.VllmEngine`, vLLM's server) -- and `run`, the
evaluation of base and tuned that the evaluate step calls, a loop over the suites on one engine. Beside them:
`scoring` (answers against rows), `losses` (eval losses, local or served), `paired` (the rows tuning lost and won,
McNemar's test), `gate` (promotion), `kept_base` (the base's answers kept in the bucket), `scales` (the adapter's
strength). Tests pass an engine of their own to `evaluate` (tests/fakes/fake_engine.py) rather than replace the
functions an engine calls.
"""

from trainer.evaluate.gate import promotion  # noqa: F401
from trainer.evaluate.generation import context_length, fitting_rows, generate, load  # noqa: F401
from trainer.evaluate.losses import eval_loss, mean_loss, served_losses  # noqa: F401
from trainer.evaluate.heldout import MIN_RELIABLE_ROWS, metrics_of, warnings_for  # noqa: F401
from trainer.evaluate.run import ENGINE_CHOICES, ENGINES, evaluate, logged_metrics, score_base  # noqa: F401
from trainer.evaluate.scoring import normalize_text, parsed_outputs, row_counts, score_predictions  # noqa: F401
from trainer.evaluate.served import choose_engine, server_plans  # noqa: F401
