"""Train/serve parity: what training teaches is what the served model's parser reads back.

- `check`: the check itself on rows and a tokenizer (see its docstring), one line per problem;
- `preflight`: the chat template against the rows before training (refused rows, syntax, the check);
- `delivered`: the same on a model tree and dataset in the bucket, a passed pair recorded there;
- `served`: a running server's rendering of the prompts against the training encoder's;
- `auto`: what `chat_template=auto` stands for on a tokenizer (the model's own, or its family's built-in).
"""

from trainer.parity.auto import choose as choose_template  # noqa: F401
from trainer.parity.check import CHECK_ROWS, Verdict, check, model_problems, problems  # noqa: F401
from trainer.parity.delivered import (
    CHECK_VERSION,
    CHECKED,
    CHECKS,
    record_key,
    check_delivered,  # noqa: F401
    delivered_problems,
)
from trainer.parity.preflight import template_problems  # noqa: F401
from trainer.parity.served import prompt_ids, served_prompts  # noqa: F401
