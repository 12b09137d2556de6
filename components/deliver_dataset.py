"""deliver_dataset: a Hub dataset, local JSONL (file or directory) or builtin:function-calling
into the bucket as validated train.jsonl + eval.jsonl, content-addressed.

Every row is checked here (trainer.data.row_problems): encodings (UTF-8 with or without a BOM),
JSON depth, field types (`tools` a list, `content` a string or null beside tool_calls, tool calls
naming declared tools); ShareGPT, Alpaca and OpenAI legacy-functions rows are converted to messages
(trainer.data.convert; the log says how many); a model given as the dataset is refused before it is
downloaded. `irrelevance_share` adds rows made by function masking to each split after it is
split (trainer.data.masking), counted in the artifact's metadata (`irrelevance_rows`)."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def deliver_dataset(
    source: str,
    revision: str,
    eval_fraction: float,
    seed: int,
    dataset: Output[Dataset],
    irrelevance_share: float = 0.0,
    irrelevance_reply: str = "None of the available tools can do that.",
    irrelevance_distractors: float = 0.0,
    name_masking: float = 0.0,
):
    """Put a chat dataset (Hub id, local JSONL/dir or builtin:function-calling) into the bucket, with
    `irrelevance_share` of each split made by function masking (trainer.data.masking), answered
    `irrelevance_reply`, `irrelevance_distractors` of them offering unrelated tools, and `name_masking` of the training rows with
    tools renamed at random (trainer.data.name_masking)."""
    from components.artifacts import write_pointer
    from trainer.store import delivery
    from trainer.core.errors import exit_on_user_error
    from trainer.core.storage import Store

    with exit_on_user_error():
        uri, meta = delivery.deliver_dataset(
            source,
            revision,
            Store.from_env(),
            eval_fraction,
            seed,
            irrelevance_share,
            irrelevance_reply,
            irrelevance_distractors,
            name_masking,
        )
    write_pointer(dataset, uri, meta)
    print(f"dataset {source} -> {uri} rows={meta['rows']}")
