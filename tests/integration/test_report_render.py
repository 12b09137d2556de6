"""The training report is a page people look at: render it in headless Chromium and check the
screenshot shows the loss curve (not a blank or broken page)."""

import shutil
from pathlib import Path
import subprocess


from trainer.evaluate.report import training_html


def fake_result():
    history = []
    for step in range(10, 310, 10):
        history.append({"step": step, "loss": 3.0 / step**0.5, "lr": 0.003})
        if step % 50 == 0:
            history.append({"step": step, "eval_loss": 3.2 / step**0.5})
    return {
        "history": history,
        "metrics": {"train_loss": 0.17, "train_steps": 300.0, "tokens_per_second": 21000.0},
        "config": {"method": "lora", "lora_r": 16, "learning_rate": 0.003},
    }


def test_report_renders_in_headless_chromium(tmp_path):
    import numpy as np
    from PIL import Image

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make test` installs it (apt-get install chromium)"
    page = tmp_path / "report.html"
    page.write_text(training_html(fake_result(), title="Render test"))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=900,900",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (900, 900)
    assert img.std() > 20  # not blank
    # the plot's lines are drawn in the train (blue) and eval (red) colours
    blue = ((abs(img[..., 0] - 31) < 30) & (abs(img[..., 1] - 119) < 30) & (abs(img[..., 2] - 180) < 30)).sum()
    red = ((abs(img[..., 0] - 214) < 30) & (abs(img[..., 1] - 39) < 30) & (abs(img[..., 2] - 40) < 30)).sum()
    assert blue > 200 and red > 100, (blue, red)
    keep = Path(__file__).resolve().parents[2] / ".runs" / "report-screenshot.png"  # for a look afterwards
    keep.parent.mkdir(exist_ok=True)
    shutil.copy(shot, keep)


def test_sweep_table_columns_keep_one_order_whatever_the_trials_key_order():
    from trainer.evaluate.report import sweep_markdown

    rows = [
        {"trial": 0, "learning_rate": 0.003, "lora_alpha": 8, "lora_r": 4, "base": 0.0, "tuned": 0.9, "gain": 0.9},
        {"trial": 1, "learning_rate": 0.001, "lora_alpha": 64, "lora_r": 64, "base": 0.0, "tuned": 0.5, "gain": 0.5},
    ]
    text = sweep_markdown({"rows": rows, "best": 0, "reason": "deploying trial 0"}, "fc_accuracy")
    assert "| trial | lora_r | lora_alpha | learning_rate | base fc_accuracy | tuned fc_accuracy | gain |" in text
    assert "| 0 (best) | 4 | 8 | 0.003 | 0 | 0.9 | 0.9 |" in text
