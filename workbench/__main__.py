"""``python -m workbench`` is the same as the ``workbench`` command."""

from workbench.cli import main

main()
