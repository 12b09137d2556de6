"""merge_lora: the LoRA adapter merged into its base, as a plain model directory in the bucket."""

from kfp import dsl
from kfp.dsl import Input, Model, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def merge_lora(base_model: Input[Model], adapter: Input[Model], merged: Output[Model], scale: float = 1.0):
    """Merge, the adapter's update at `scale` (the evaluate step's chosen merge_scale), upload content-addressed,
    point `merged` at it (loadable by from_pretrained)."""
    import tempfile

    from components.artifacts import read_uri, write_pointer
    from trainer.core.errors import exit_on_user_error
    from trainer.models.merge import merge
    from trainer.models.model import skip_bitsandbytes
    from trainer.core.storage import Store

    with exit_on_user_error(), tempfile.TemporaryDirectory() as tmp:
        store = Store.from_env()
        adapter_dir = store.get_tree(read_uri(adapter))
        skip_bitsandbytes(adapter_dir=adapter_dir)  # this pod loads no 4-bit model: 1.4 s less
        out = merge(store.get_tree(read_uri(base_model)), adapter_dir, tmp, scale)
        uri, meta = store.put_tree(out, "models")
    write_pointer(merged, uri, {**meta, "source": read_uri(adapter), "merge_scale": scale})
    print(f"merged model -> {uri} ({meta['total_bytes']} bytes)")
