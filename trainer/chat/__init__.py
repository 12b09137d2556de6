"""The chat vocabulary every layer above shares, and the bottom of trainer's import order: it
imports nothing of the project's but `trainer.core.errors` (import-linter holds that, see pyproject.toml).

- `turns`: which assistant turn a row is scored on and trained on, and what it expects there
  (a call, several, or text);
- `calls`: tool-call arguments decoded (one decoder) and calls read into `{"name", "arguments"}`;
- `parsers`: the tool-call parsers (vLLM's, and the project's reading of them for images without
  vLLM), the parser a chat template calls for, and a model tree's chat-template text;
- `messages`: rows as the OpenAI chat API takes them.
"""
