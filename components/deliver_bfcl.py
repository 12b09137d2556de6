"""deliver_bfcl: BFCL's data (the Berkeley Function Calling Leaderboard v4) into the bucket, content-addressed,
when eval_suites scores bfcl; and the training rows checked against its questions before anything trains."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def deliver_bfcl(source: str, eval_suites: str, dataset: Input[Dataset], bfcl: Output[Dataset]):
    """Deliver BFCL's data (trainer.store.delivery.deliver_bfcl) and refuse a dataset whose training rows ask
    one of its questions; with eval_suites not scoring bfcl, an empty pointer and nothing fetched."""
    from components.artifacts import read_uri, write_pointer
    from trainer.store import delivery
    from trainer.data import bfcl as bfcl_data
    from trainer.core.errors import exit_on_user_error
    from trainer.core.storage import Store

    with exit_on_user_error():
        if "bfcl" not in bfcl_data.parse_suites(eval_suites):
            write_pointer(bfcl, "", {"source": "", "rows": {}})
            print(f"eval_suites={eval_suites}: BFCL not scored, nothing delivered")
            return
        store = Store.from_env()
        uri, meta = delivery.deliver_bfcl(source, store)
        delivery.bfcl_contamination(read_uri(dataset), uri, store)
    write_pointer(bfcl, uri, meta)
    bfcl.metadata["version"] = meta["version"]
    print(
        f"BFCL {meta['version']} ({meta['source']}) -> {uri}: {sum(meta['rows'].values())} single-turn rows in "
        f"{len(meta['rows'])} categories; no training row asks one of them"
    )
