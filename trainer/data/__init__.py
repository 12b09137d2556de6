"""Chat data: read and validate rows, tokenize with an assistant-only loss mask.

Row format (OpenAI / Hugging Face chat): `{"messages": [{"role", "content",
"tool_calls"?, "weight"?}, ...], "tools"?: [...]}`. A tool call's `arguments` may be a dict
or a JSON string (OpenAI's wire format); it is normalised to a dict on load. An assistant
message with `"weight": 0` is not trained on (OpenAI's fine-tuning format). Other formats
become messages on load, deterministically, with one line saying how many rows were converted:
  prompt-completion  `{"prompt", "completion", "system"?}`, strings or message lists (TRL)
  ShareGPT           `{"conversations": [{"from", "value"}], "system"?, "tools"?}` (axolotl,
                     LLaMA-Factory): human -> user, gpt (chatgpt, bing) -> assistant, observation/tool
                     -> tool, function_call (JSON `{"name", "arguments"}`) -> an assistant tool call;
                     a turn's `weight` is kept on assistant turns only, empty system turns skipped
  Alpaca             `{"instruction", "input"?, "output", "system"?, "history"?}`: the user turn
                     is instruction and input joined by a newline (as LLaMA-Factory joins them)
  OpenAI legacy      `functions` -> `tools`, `function_call` -> `tool_calls`, role function -> tool
  glaive-v2          `{"system", "chat"}`: functions in the system text, USER/ASSISTANT/FUNCTION RESPONSE
                     turns, `<functioncall> {...}` -> a tool call (arguments in single quotes read)
  Hermes             ShareGPT with `<tools>` (system), `<tool_call>` (gpt), `<tool_response>` (tool)
  xLAM / APIGen      `{"query", "tools", "answers"}`: parameter types as JSON schema, answers -> calls
  (see trainer.data.fc_formats; their calls get ids call_0, call_1, ... and results the id they answer).
A file mixing ShareGPT, Alpaca, glaive or xLAM rows with rows of another format is refused (row numbers
named).
Files: JSONL, a JSON list of rows (or one row), CSV (JSON text in the `messages` / `tools` cells)
and Parquet; every reader ends in the same row checks.

The package: loading (a source, any of the above, read into checked train and eval splits), formats (which
format, and conversions to chat rows; fc_formats the function-calling datasets' readers), rows (row checks),
readers (files), encode (token ids and loss
masks), preflight (length checks before training, and the time budget the template check of
trainer.parity.preflight shares); every name is importable from `trainer.data`. JSON text inside rows is read strictly by
trainer.core.jsontext, which dataset_source's mixes (trainer.config.sources) read with too.
"""

from trainer.data.batching import collate, collate_packed, real_tokens  # noqa: F401
from trainer.data.formats import (  # noqa: F401
    SHAREGPT_ROLES,
    FORMAT_NAMES,
    CONVERTED,
    row_format,
    convert,
    format_problems,
    quiet_conversions,
    announce,
)
from trainer.core.jsontext import lone_surrogate, surrogate_problem, non_finite_paths, json_loads  # noqa: F401
from trainer.data.rows import ROLES, MAX_REPORTED, row_problems, normalise, validate_rows  # noqa: F401
from trainer.data.readers import (  # noqa: F401
    CHECKED,
    ROW_CHECKS,
    read_jsonl,
    read_delivered,
    FILE_TYPES,
    read_rows,
    suffix_of,
    write_delivered,
    write_jsonl,
)
from trainer.data.encode import (  # noqa: F401
    encode,
    text_chars,
    max_token_chars,
    encode_rows,
    encode_all,
)
from trainer.data.preflight import (  # noqa: F401
    TEMPLATE_CHECK_ROWS,
    TEMPLATE_BUDGET_S,
    time_limit,
    length_problems,
    eval_overlap,
)
from trainer.data.loading import load, row_origins  # noqa: F401
