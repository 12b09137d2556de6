"""not_deployed: the sweep's other branch: says clearly why nothing was deployed."""

from kfp import dsl
from kfp.dsl import Markdown, Output

from trainer.core import settings


@dsl.component(base_image=settings.image(), install_kfp_package=False)
def not_deployed(reason: str, note: Output[Markdown]) -> str:
    """Record the decision in the run (log and a Markdown artifact the KFP UI shows); returns the
    endpoint there is, none (the pipeline's `endpoint` output on this branch)."""
    print(reason)
    with open(note.path, "w") as f:
        f.write(f"# Not deployed\n\n{reason}\n")
    return ""
