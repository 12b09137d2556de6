"""deliver_model: a Hub id, local directory or builtin:tiny-llama into the bucket, checksummed
and content-addressed (re-delivering unchanged content uploads nothing).

A source that cannot train is refused here, before the upload and long before any GPU: no
config.json or a malformed one, no weights or a shard missing from the index, no tokenizer or
no chat template, a dataset given as the model (exit 2, one message; trainer.config.sources). The chosen
chat template is written into the delivered tree, so training, evaluation, the merged model and
vLLM all read that one file (trainer.chat.templates)."""

from kfp import dsl
from kfp.dsl import Model, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def deliver_model(source: str, revision: str, model: Output[Model], chat_template: str = "model"):
    """Put a model (Hub id, local dir, .gguf file or builtin:tiny-llama) into the bucket, with the
    chat template `chat_template` names (trainer.chat.templates) as its chat_template.jinja."""
    from components.artifacts import write_pointer
    from trainer.store import delivery
    from trainer.core.errors import exit_on_user_error
    from trainer.core.storage import Store

    with exit_on_user_error():
        uri, meta = delivery.deliver_model(source, revision, Store.from_env(), chat_template)
    write_pointer(model, uri, meta)
    print(f"model {source} -> {uri} ({meta['total_bytes']} bytes, {meta['uploaded_bytes']} uploaded)")
