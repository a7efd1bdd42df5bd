"""An adapter's model card says how to check its base's sha256 (issue 42): that sha256 is a digest over the weight
files' digests, which ``sha256sum`` alone cannot reproduce, so the card lists each weight file's sha256 and gives a
shell line that recomputes the whole — run here with bash and coreutils in the base's directory, it must print the
card's sha256. A base that is itself an adapter gets the line for its merged-from digest."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from tests.unit.backends.test_peft_dir import _save
from workbench.assets import weights_digest


def _card_digest(card: str) -> str:
    return re.search(r"^\| weights sha256 \| `([0-9a-f]{64})` \|$", card, re.MULTILINE).group(1)


def _bash_after(card: str, lead: str) -> str:
    """The bash block that follows the sentence containing ``lead``."""
    tail = card[card.index(lead) :]
    return re.search(r"```bash\n(.+?)\n```", tail, re.DOTALL).group(1)


def _run(command: str, cwd: Path) -> str:
    out = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()[0]


def test_the_card_lists_each_weight_file_and_a_line_that_recomputes_the_base_sha256(tiny_lm_dir, tmp_path):
    card = (_save(tmp_path / "adapter", tiny_lm_dir) / "README.md").read_text()
    digest = _card_digest(card)
    assert digest == weights_digest(tiny_lm_dir)
    assert "## Checking the base's sha256" in card and "`sha256sum` alone does not give it" in card
    rows = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", card, re.MULTILINE)
    assert rows and all(name.endswith(".safetensors") for name, _ in rows)
    for name, sha in rows:  # what sha256sum prints for each file
        assert hashlib.sha256((Path(tiny_lm_dir) / name).read_bytes()).hexdigest() == sha
    assert _run(_bash_after(card, "this prints the sha256 above"), Path(tiny_lm_dir)) == digest


def test_an_adapter_base_gets_its_merged_from_line(tiny_lm_dir, tmp_path):
    from workbench.backends.lora import resolve_adapter_model

    first = _save(tmp_path / "first", tiny_lm_dir)
    card = (_save(tmp_path / "second", tiny_lm_dir, base_model=first, seed=1) / "README.md").read_text()
    digest = _card_digest(card)
    assert digest == weights_digest(resolve_adapter_model(first).path)
    assert "`merged-adapter`, a NUL byte" in card and "```json\n{" in card
    assert _run(_bash_after(card, "This prints the sha256 above"), tmp_path) == digest
